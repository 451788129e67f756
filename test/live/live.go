// Package live checks, against a real Scaleway account, the shapes of the
// Elastic Metal and IAM answers the provider relies on: offers per zone,
// servers found by the cluster's tag, the IAM SSH keys. It only reads: every
// request that is not a GET is refused before it leaves the process, so it
// can never order, tag, reboot or delete anything.
//
// Operators run it with `make smoke-live` (credentials from the standard
// SCW_* environment variables); its tests run it against the simulator.
package live

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Level of a finding.
type Level string

const (
	OK   Level = "ok"
	Warn Level = "warn" // worth knowing; the provider copes
	Fail Level = "FAIL" // a shape the provider relies on is not there
)

// Finding is one checked fact.
type Finding struct {
	Level Level
	Where string // zone, or "iam"
	What  string
}

// Report is every finding of a run.
type Report struct{ Findings []Finding }

func (r *Report) add(l Level, where, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Level: l, Where: where, What: fmt.Sprintf(format, args...)})
}

// Failed reports whether any finding failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Fail })
}

// Print writes one line per finding and a summary.
func (r *Report) Print(w io.Writer) {
	counts := map[Level]int{}
	for _, f := range r.Findings {
		counts[f.Level]++
		fmt.Fprintf(w, "%-4s  %-9s %s\n", f.Level, f.Where, f.What)
	}
	fmt.Fprintf(w, "%d ok, %d warnings, %d failures\n", counts[OK], counts[Warn], counts[Fail])
}

// ReadOnly wraps a transport so that only GET requests go out.
func ReadOnly(base http.RoundTripper) http.RoundTripper { return readOnly{base} }

type readOnly struct{ base http.RoundTripper }

func (t readOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		return nil, fmt.Errorf("smoke-live only reads: refusing %s %s", r.Method, r.URL.Path)
	}
	return t.base.RoundTrip(r)
}

// Options of a run.
type Options struct {
	Zones   []scw.Zone
	Cluster string // the provider's CLUSTER_NAME: servers tagged karpenter.sh/managed-by=<Cluster>
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

var knownPhases = []string{"ordered", "rescue", "imaging", "booting", "joined", "spare"}

// Run checks every zone, then IAM. c must be built on a ReadOnly transport.
func Run(ctx context.Context, c *scaleway.Client, o Options) *Report {
	r := &Report{}
	ids := map[string]map[string]bool{} // offer name -> IDs seen across zones
	for _, zone := range o.Zones {
		checkOffers(ctx, c, zone, r, ids)
		checkServers(ctx, c, zone, o.Cluster, r)
		checkRescueLogins(ctx, c, zone, r)
	}
	shared, split := 0, []string{}
	for name, set := range ids {
		if len(set) > 1 {
			split = append(split, name)
		} else {
			shared++
		}
	}
	sort.Strings(split)
	if len(split) > 0 {
		r.add(Warn, "zones", "offers with different IDs in different zones (the catalogue keys offers by zone and name, so this is handled): %s", strings.Join(split, ", "))
	} else {
		r.add(OK, "zones", "%d offers (name and period), each with one ID in every zone that sells it", shared)
	}
	checkKeys(ctx, c, o.Cluster, r)
	return r
}

func checkOffers(ctx context.Context, c *scaleway.Client, zone scw.Zone, r *Report, ids map[string]map[string]bool) {
	where := string(zone)
	monthlyIDs := map[string]bool{}
	monthly, err := c.ListOffers(ctx, zone, baremetal.OfferSubscriptionPeriodMonthly)
	if err != nil {
		r.add(Fail, where, "listing monthly offers: %v", err)
		return
	}
	for _, o := range monthly {
		monthlyIDs[o.ID] = true
	}
	hourly, err := c.ListOffers(ctx, zone, baremetal.OfferSubscriptionPeriodHourly)
	if err != nil {
		r.add(Fail, where, "listing hourly offers: %v", err)
		return
	}
	bad := 0
	for _, list := range []struct {
		period baremetal.OfferSubscriptionPeriod
		offers []*baremetal.Offer
	}{{baremetal.OfferSubscriptionPeriodHourly, hourly}, {baremetal.OfferSubscriptionPeriodMonthly, monthly}} {
		for _, o := range list.offers {
			if problem := offerProblem(o, list.period); problem != "" {
				r.add(Fail, where, "offer %s (%s): %s", o.Name, o.ID, problem)
				bad++
				continue
			}
			if list.period == baremetal.OfferSubscriptionPeriodHourly && danglingMonthly(o, monthlyIDs) {
				r.add(Warn, where, "offer %s names monthly offer %s, which the zone does not list", o.Name, *o.MonthlyOfferID)
			}
			if ids[o.Name+"/"+string(list.period)] == nil {
				ids[o.Name+"/"+string(list.period)] = map[string]bool{}
			}
			ids[o.Name+"/"+string(list.period)][o.ID] = true
		}
	}
	if bad == 0 {
		r.add(OK, where, "%d hourly and %d monthly offers have the fields the catalogue reads", len(hourly), len(monthly))
	}
	if _, err := c.PrivateNetworkOptionID(ctx, zone); err != nil {
		r.add(Warn, where, "no Private Network option (NodeClasses with privateNetworkIDs cannot use this zone): %v", err)
	} else {
		r.add(OK, where, "the Private Network option is offered")
	}
}

// offerProblem says what the catalogue would miss in an offer ("" if nothing).
func offerProblem(o *baremetal.Offer, period baremetal.OfferSubscriptionPeriod) string {
	switch {
	case o == nil:
		return "null entry"
	case !uuidRE.MatchString(o.ID):
		return "id is not a UUID"
	case o.Name == "":
		return "no name"
	case o.SubscriptionPeriod != "" && o.SubscriptionPeriod != period:
		return fmt.Sprintf("subscription_period %q in the %s listing", o.SubscriptionPeriod, period)
	}
	return offerContentProblem(o, period)
}

// offerContentProblem checks what an offer sells: a known stock value,
// hardware lists, and the price its listing's period needs.
func offerContentProblem(o *baremetal.Offer, period baremetal.OfferSubscriptionPeriod) string {
	switch {
	case !slices.Contains(baremetal.OfferStock("").Values(), o.Stock):
		return fmt.Sprintf("stock %q is not one of %v", o.Stock, baremetal.OfferStock("").Values())
	case len(o.CPUs) == 0 || len(o.Memories) == 0 || len(o.Disks) == 0:
		return "cpus, memories or disks empty"
	case period == baremetal.OfferSubscriptionPeriodHourly && o.PricePerHour == nil:
		return "no price_per_hour"
	case period == baremetal.OfferSubscriptionPeriodMonthly && o.PricePerMonth == nil:
		return "no price_per_month"
	}
	return ""
}

// danglingMonthly: an hourly offer naming a monthly offer the zone does not
// list. Recorded too (listings change over time); the catalogue pairs hourly
// and monthly offers by name, so it copes.
func danglingMonthly(o *baremetal.Offer, monthlyIDs map[string]bool) bool {
	return o.MonthlyOfferID != nil && !monthlyIDs[*o.MonthlyOfferID]
}

func checkServers(ctx context.Context, c *scaleway.Client, zone scw.Zone, cluster string, r *Report) {
	where := string(zone)
	if cluster == "" {
		return
	}
	tag := scaleway.Tag(scaleway.TagManagedBy, cluster)
	servers, err := c.ListServers(ctx, zone, []string{tag})
	if err != nil {
		r.add(Fail, where, "listing servers tagged %s: %v", tag, err)
		return
	}
	bad := 0
	for _, s := range servers {
		if problem := serverProblem(s, zone); problem != "" {
			r.add(Fail, where, "server %s: %s", s.ID, problem)
			bad++
			continue
		}
		if s.Status == baremetal.ServerStatusReady && scaleway.IPv4Of(s) == "" {
			r.add(Warn, where, "server %s is ready but lists no IPv4 (the install waits for it)", s.ID)
		}
	}
	if bad == 0 {
		r.add(OK, where, "%d servers tagged %s, all with a known status and phase", len(servers), tag)
	}
	checkHandedOver(ctx, c, zone, cluster, r)
}

// serverProblem says what about a listed server the provider would not
// understand: a status the SDK does not know, no offer name or another
// zone, a phase tag it never writes; empty when none.
func serverProblem(s *baremetal.Server, zone scw.Zone) string {
	phase, _ := scaleway.TagValue(s.Tags, scaleway.TagPhase)
	switch {
	case !slices.Contains(baremetal.ServerStatus("").Values(), s.Status):
		return fmt.Sprintf("status %q is not one the SDK knows", s.Status)
	case s.OfferName == "" || s.Zone != zone:
		return fmt.Sprintf("offer_name %q, zone %q", s.OfferName, s.Zone)
	case phase != "" && !slices.Contains(knownPhases, phase):
		return fmt.Sprintf("phase tag %q is not a phase of this provider", phase)
	}
	return ""
}

// checkHandedOver warns of spares a deleted NodeClass handed over
// (sparesOnDeletion: Keep): paid, and no controller manages them any more.
func checkHandedOver(ctx context.Context, c *scaleway.Client, zone scw.Zone, cluster string, r *Report) {
	where := string(zone)
	handed := scaleway.Tag(scaleway.TagHandedOverBy, cluster)
	kept, err := c.ListServers(ctx, zone, []string{handed})
	switch {
	case err != nil:
		r.add(Fail, where, "listing servers tagged %s: %v", handed, err)
	case len(kept) > 0:
		ids := make([]string, 0, len(kept))
		for _, s := range kept {
			ids = append(ids, s.ID)
		}
		r.add(Warn, where, "%d servers tagged %s: handed over by a deleted NodeClass, paid and no longer managed: %s", len(kept), handed, strings.Join(ids, ", "))
	default:
		r.add(OK, where, "0 servers tagged %s", handed)
	}
}

// checkRescueLogins tells which rescue login the zone's rescue systems have,
// from every server of the project shown in rescue: the user the API shows
// for the boot, and whether it shows a password (never the password).
func checkRescueLogins(ctx context.Context, c *scaleway.Client, zone scw.Zone, r *Report) {
	where := string(zone)
	servers, err := c.ListServers(ctx, zone, nil)
	if err != nil {
		r.add(Fail, where, "listing the project's servers for their rescue login: %v", err)
		return
	}
	seen := 0
	for _, s := range servers {
		if line, ok := RescueLogin(s); ok {
			r.add(OK, where, "%s", line)
			seen++
		}
	}
	if seen == 0 {
		r.add(OK, where, "no server in rescue: which rescue login this zone has shows once one runs rescue (docs/security.md#rescue)")
	}
}

// RescueLogin describes the rescue login the API shows for s, when s runs
// rescue: the user and whether a password is given (never its value),
// and which of the known kinds that is. ok is false for a server not in
// rescue.
func RescueLogin(s *baremetal.Server) (line string, ok bool) {
	if s == nil || s.BootType != baremetal.ServerBootTypeRescue {
		return "", false
	}
	rs := s.RescueServer
	if rs == nil || rs.User == "" {
		return fmt.Sprintf("server %s runs rescue (status %s) but the API shows no rescue user: the controller logs in as RESCUE_SSH_USER", s.ID, s.Status), true
	}
	password := "no password given"
	if rs.Password != "" {
		password = "a password given"
	}
	kind := "the per-server kind: the controller logs in as this user and, if sudo asks, gives it the API's password on stdin"
	if rs.User == "rescue" {
		kind = "the key-only kind: the controller logs in as rescue and runs sudo -n (the password, if sudo asks, on stdin)"
	}
	// The user is the API's string: quoted, so that a strange one shows as is.
	return fmt.Sprintf("server %s runs rescue: user %q, %s; %s", s.ID, rs.User, password, kind), true
}

func checkKeys(ctx context.Context, c *scaleway.Client, cluster string, r *Report) {
	keys, err := c.ListSSHKeys(ctx)
	if err != nil {
		r.add(Fail, "iam", "listing SSH keys of the project: %v", err)
		return
	}
	for _, k := range keys {
		if k == nil || k.ID == "" || k.PublicKey == "" {
			r.add(Fail, "iam", "an SSH key without ID or public key")
			return
		}
	}
	r.add(OK, "iam", "%d SSH keys listed with ID and public key", len(keys))
	if cluster == "" {
		return
	}
	name := "karpenter-scaleway-em-" + cluster
	for _, k := range keys {
		if k.Name == name {
			r.add(OK, "iam", "the rescue key %s is registered (%s)", name, k.ID)
			return
		}
	}
	// The key is in IAM only while an install or a pre-imaging needs a rescue
	// boot (package rescuekey): its absence is the normal state.
	r.add(OK, "iam", "no SSH key named %s: none needed now (the controller registers it only while an install or a pre-imaging needs a rescue boot)", name)
}
