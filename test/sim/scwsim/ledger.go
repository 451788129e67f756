package scwsim

import (
	"fmt"
	"strings"
	"time"
)

// LedgerKind is what happened to a server, as the simulated Scaleway saw it.
type LedgerKind string

// Ledger entry kinds: every change of a server that costs money or takes it
// from whoever uses it.
const (
	LedgerOrder  LedgerKind = "order"  // POST /servers committed
	LedgerTags   LedgerKind = "tags"   // PATCH with tags committed
	LedgerReboot LedgerKind = "reboot" // reboot or start committed (BootType says into what)
	LedgerStop   LedgerKind = "stop"   // stop committed
	LedgerDelete LedgerKind = "delete" // DELETE committed: billing ends here
	LedgerGone   LedgerKind = "gone"   // the server no longer exists
)

// LedgerEntry is one committed change of a server. The simulator writes it
// when the change takes effect, whatever becomes of the answer (a fault that
// loses the answer after the commit still leaves its entry), so the ledger
// is a record independent of what the controller believes happened.
type LedgerEntry struct {
	Seq    int
	At     time.Time
	Kind   LedgerKind
	Server string
	Zone   string
	Offer  string // offer name
	Period string // "hourly" or "monthly": what the order bought
	// Prices of the offer the server was ordered with, in EUR.
	PricePerHour, PricePerMonth, Fee float64
	Created                          time.Time
	// Tags are the server's tags after the change; Before, its tags before
	// it (tags edits, and every other kind: the tags it had when acted on).
	Tags, Before []string
	BootType     string // reboot: "normal" or "rescue"
	Status       string // the server's status before the change
}

// Tag returns the value of key in the entry's tags after the change.
func (e LedgerEntry) Tag(key string) string { return TagValue(e.Tags, key) }

// TagBefore returns the value of key in the entry's tags before the change.
func (e LedgerEntry) TagBefore(key string) string { return TagValue(e.Before, key) }

// TagValue returns the value of the "key=value" tag in tags ("" = none).
func TagValue(tags []string, key string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, key+"="); ok {
			return v
		}
	}
	return ""
}

// String is one line of the ledger, as a violation report prints it.
func (e LedgerEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %-6s %s %s/%s (%s)", e.Seq, e.At.UTC().Format("15:04:05.000"), e.Kind, e.Server, e.Zone, e.Offer, e.Period)
	if e.BootType != "" {
		fmt.Fprintf(&b, " boot=%s", e.BootType)
	}
	if e.Status != "" {
		fmt.Fprintf(&b, " was=%s", e.Status)
	}
	if e.Kind == LedgerTags {
		fmt.Fprintf(&b, " tags %v -> %v", e.Before, e.Tags)
	} else {
		fmt.Fprintf(&b, " tags %v", e.Tags)
	}
	return b.String()
}

// Ledger returns every committed change so far, oldest first.
func (s *Sim) Ledger() []LedgerEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LedgerEntry, len(s.ledger))
	copy(out, s.ledger)
	return out
}

// record appends an entry about sv. Caller holds mu.
func (s *Sim) record(sv *server, kind LedgerKind, before []string, bootType, status string) {
	e := LedgerEntry{Seq: len(s.ledger) + 1, At: s.now(), Kind: kind, Server: sv.id, Zone: sv.zone,
		Created: sv.createdAt, Tags: append([]string(nil), sv.tags...), Before: append([]string(nil), before...),
		BootType: bootType, Status: status}
	if o := sv.offer; o != nil {
		e.Offer, e.Period = o.Name, o.Period
		if o.sdk != nil {
			if o.sdk.PricePerHour != nil {
				e.PricePerHour = o.sdk.PricePerHour.ToFloat()
			}
			if o.sdk.PricePerMonth != nil {
				e.PricePerMonth = o.sdk.PricePerMonth.ToFloat()
			}
			if o.sdk.Fee != nil {
				e.Fee = o.sdk.Fee.ToFloat()
			}
		}
	}
	s.ledger = append(s.ledger, e)
}
