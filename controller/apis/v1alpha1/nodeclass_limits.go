package v1alpha1

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LimitsSpec caps the spend of a NodeClass, in euros, as decimal strings ("12.5"). An order that would cross
// a limit is not placed: Create reports insufficient capacity and Karpenter tries another offering or
// NodePool. Reusing a spare monthly server costs nothing extra and is never refused.
type LimitsSpec struct {
	// HourlySpend caps what the NodeClass's servers cost per hour (EUR/h): hourly servers at their price per
	// hour, monthly servers at their monthly price over 730 hours, spares included.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,4})?$`
	// +optional
	HourlySpend string `json:"hourlySpend,omitempty"`
	// MonthlyCommitment caps the monthly fees committed in the current calendar month (UTC, EUR): the monthly
	// price of every monthly server plus the setup fee of those ordered this month, spares included.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,4})?$`
	// +optional
	MonthlyCommitment string `json:"monthlyCommitment,omitempty"`
}

// EUR parses a limit; ok is false when it is unset (or does not parse, which the CRD's pattern prevents).
func EUR(limit string) (float64, bool) {
	if limit == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(limit, 64)
	return v, err == nil && v >= 0
}

// InstallsStatus is the install-failure breaker's state: consecutive install failures of the NodeClass's
// servers, and while they stop orders, when the next (probe) order is allowed.
type InstallsStatus struct {
	// ConsecutiveFailures since the last install that joined, within the breaker's window.
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// WindowStart is the first failure of the current count.
	// +optional
	WindowStart *metav1.Time `json:"windowStart,omitempty"`
	// Opened counts the breaker's successive openings (it doubles the backoff); 0 when closed.
	Opened int32 `json:"opened,omitempty"`
	// NextAttempt is when one probe order is allowed again while open.
	// +optional
	NextAttempt *metav1.Time `json:"nextAttempt,omitempty"`
	// ProbeNodeClaim is the NodeClaim whose order was the probe after a backoff: no other order until its
	// install ends (or the NodeClaim is gone).
	// +optional
	ProbeNodeClaim string `json:"probeNodeClaim,omitempty"`
	// LastFailure is the last install failure counted.
	// +optional
	LastFailure *InstallFailure `json:"lastFailure,omitempty"`
	// Generation and JoinSecretResourceVersion are those of the NodeClass and its join Secret when the
	// failures were counted: a change of either resets the breaker.
	Generation                int64  `json:"generation,omitempty"`
	JoinSecretResourceVersion string `json:"joinSecretResourceVersion,omitempty"`
}

// InstallFailure is one failed install.
type InstallFailure struct {
	// Phase the install failed in (ordered, rescue, imaging, booting).
	Phase string `json:"phase,omitempty"`
	// Code is em-imager's error code (e.g. disk_not_found), or phase_failed.
	Code string `json:"code,omitempty"`
	// Offering is zone/offer/billing period.
	Offering string `json:"offering,omitempty"`
	// NodeClaim whose install failed.
	NodeClaim string       `json:"nodeClaim,omitempty"`
	Time      *metav1.Time `json:"time,omitempty"`
}
