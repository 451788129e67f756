package cloudprovider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
)

// AnnotationOrdering is written on a NodeClaim before Create takes a spare
// for it or orders its server: "<RFC 3339 time> <process>", and again
// before each order is sent with the offering it is for: "<time> <process>
// <zone>/<offer>/<billing>" (the spend limits of the next process count
// it: Records). What a process
// remembers of its orders (an answer lost, a server its own listings do
// not show yet) dies with it, and Karpenter records the server's
// providerID only after Create returns. A leader killed in between (every
// rollout kills the old leader without releasing its Lease) leaves a
// NodeClaim without providerID whose server the listings may not show yet;
// the next leader would give it a second one. The annotation survives the
// process: another process that finds it, recent, waits for the server to
// show in the listings instead of taking or ordering one.
const AnnotationOrdering = "karpenter-scaleway-em.io/ordering"

// newProcessID names this controller process in AnnotationOrdering.
func newProcessID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// markOrdering records on the stored NodeClaim that this process is about
// to give it a server. A copy is patched, not claim: Karpenter patches
// claim afterwards from its own copy, and a changed resourceVersion in it
// would make that patch conflict. Without the record nothing is taken or
// ordered: a process that dies after the order must leave it behind.
//
// The patch is conditional on the resourceVersion Create was given: an old
// leader that froze (a stopped container, a long pause) and wakes up after
// the next leader recorded its own order or the server's providerID holds
// a stale NodeClaim, and must not order a second server on the strength of
// it: on a conflict the NodeClaim is read again and judged again.
func (c *CloudProvider) markOrdering(ctx context.Context, claim *karpv1.NodeClaim) error {
	if c.Kube == nil {
		return nil
	}
	marked, base := withOrdering(claim, c.orderingValue(""))
	err := c.Kube.Patch(ctx, marked, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		// Changed since the copy Create was given: read it again and judge
		// again on what it says now (another process's server or record
		// wins), then try once more on that version.
		latest := &karpv1.NodeClaim{}
		if gerr := c.Kube.Get(ctx, client.ObjectKeyFromObject(claim), latest); gerr != nil {
			return fmt.Errorf("recording on nodeclaim %s that a server is being ordered for it: %w", claim.Name, gerr)
		}
		if latest.Status.ProviderID != "" {
			return fmt.Errorf("nodeclaim %s has a server already (%s): nothing is ordered", claim.Name, latest.Status.ProviderID)
		}
		if at, ok := c.orderingElsewhere(latest); ok {
			return fmt.Errorf("nodeclaim %s: %w: an earlier controller process began taking or ordering its server at %s",
				claim.Name, scaleway.ErrOrderInFlight, at.Format(time.RFC3339))
		}
		marked, base = withOrdering(latest, c.orderingValue(""))
		err = c.Kube.Patch(ctx, marked, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	if err != nil {
		return fmt.Errorf("recording on nodeclaim %s that a server is being ordered for it: %w", claim.Name, err)
	}
	return nil
}

// withOrdering is a copy of claim whose AnnotationOrdering is value, and
// the unchanged copy a patch of it is computed from.
func withOrdering(claim *karpv1.NodeClaim, value string) (marked, base *karpv1.NodeClaim) {
	base, marked = claim.DeepCopy(), claim.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[AnnotationOrdering] = value
	return marked, base
}

// orderingValue is this process's AnnotationOrdering, now, for offering
// ("zone/offer/billing"; "" before one is chosen).
func (c *CloudProvider) orderingValue(offering string) string {
	v := time.Now().UTC().Format(time.RFC3339Nano) + " " + c.process
	if offering != "" {
		v += " " + offering
	}
	return v
}

// recordOffering records on the stored NodeClaim, just before its order is
// sent, what the order is for: if this process dies before a listing shows
// the server, the next one counts it against the NodeClass's spend limits
// (Records). The claim's record (markOrdering) is already this process's,
// so a plain merge of the one annotation is enough. Without the record
// nothing is sent.
func (c *CloudProvider) recordOffering(ctx context.Context, claim *karpv1.NodeClaim, zone, offer string, billing catalog.BillingPeriod) error {
	if c.Kube == nil {
		return nil
	}
	marked, base := withOrdering(claim, c.orderingValue(zone+"/"+offer+"/"+string(billing)))
	if err := c.Kube.Patch(ctx, marked, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("recording on nodeclaim %s the offering ordered for it: %w", claim.Name, err)
	}
	return nil
}

// ordering is a parsed AnnotationOrdering.
type ordering struct {
	at      time.Time
	process string
	// rec is the offering ordered; rec.Zone is "" when none was recorded.
	rec spendlimit.Record
}

func parseOrdering(v string) (ordering, bool) {
	f := strings.Fields(v)
	if len(f) < 2 {
		return ordering{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		return ordering{}, false
	}
	o := ordering{at: at, process: f[1]}
	if len(f) > 2 {
		if p := strings.Split(f[2], "/"); len(p) == 3 {
			o.rec = spendlimit.Record{Zone: p[0], Offer: p[1], Billing: catalog.BillingPeriod(p[2])}
		}
	}
	return o, true
}

// orderingElsewhere reports when another controller process (an earlier
// leader, this controller before a restart) began giving claim a server,
// if that was less than the order settle window ago: the server it took or
// ordered may exist though no listing shows it yet. This process's own
// record is not an answer: what it knows of its own orders is in memory
// (scaleway.Client.OrderInFlight).
func (c *CloudProvider) orderingElsewhere(claim *karpv1.NodeClaim) (time.Time, bool) {
	o, ok := parseOrdering(claim.Annotations[AnnotationOrdering])
	if !ok || o.process == c.process || time.Since(o.at) >= c.API.Config().OrderSettle {
		return time.Time{}, false
	}
	return o.at, true
}

// Records are the orders other controller processes recorded on the
// NodeClaims of NodeClass nodeClass within the order settle window, with
// their offering (spendlimit.Limiter.Records): a leader that died after
// sending them left nothing else behind, and listings may not show their
// servers yet. A NodeClaim deleted since is not seen (its server, if it
// was taken, counts once listed).
func (c *CloudProvider) Records(ctx context.Context, nodeClass string) ([]spendlimit.Record, error) {
	claims := &karpv1.NodeClaimList{}
	if err := c.Kube.List(ctx, claims); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	settle := c.API.Config().OrderSettle
	var out []spendlimit.Record
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.Spec.NodeClassRef == nil || claim.Spec.NodeClassRef.Name != nodeClass {
			continue
		}
		o, ok := parseOrdering(claim.Annotations[AnnotationOrdering])
		if !ok || o.process == c.process || o.rec.Zone == "" || time.Since(o.at) >= settle {
			continue
		}
		o.rec.Tag = scaleway.Tag(scaleway.TagNodeClaim, claim.Name)
		out = append(out, o.rec)
	}
	return out, nil
}
