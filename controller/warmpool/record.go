package warmpool

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
)

// AnnotationPrefix starts the NodeClass annotation that records a slot's
// order before it is sent, one per slot: "<RFC 3339 time> <process>
// <zone>/<offer>/<billing>/<index>". What a process remembers of its
// orders (Controller.ordered, the API client's orders in flight) dies with
// it, and a warm-pool order has no NodeClaim to carry the record Create
// writes. A leader killed after ordering a slot, before any listing showed
// the server (every rollout kills the old leader without releasing its
// Lease), would leave the next leader ordering the same slot again: the
// pool would hold more than its size, an hour or a month each. The
// annotation survives the process: another process that finds it, less
// than the order settle window old, counts the slot as ordered and the
// order against the spend limits until a listing shows the slot.
const AnnotationPrefix = "warm-pool-order.karpenter-scaleway-em.io/"

// record is a parsed slot record.
type record struct {
	at      time.Time
	process string
	key     Key
	index   int
}

// recordKey is the annotation of slot index of key: readable where the
// names allow it, a digest where they do not fit an annotation name.
func recordKey(k Key, index int) string {
	name := fmt.Sprintf("%s.%s.%s.%d", k.Zone, k.Offer, k.Billing, index)
	ok := len(name) <= 63
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			ok = false
		}
	}
	if !ok {
		sum := sha256.Sum256([]byte(name))
		name = "slot-" + hex.EncodeToString(sum[:12])
	}
	return AnnotationPrefix + name
}

func parseRecord(v string) (record, bool) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return record{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		return record{}, false
	}
	p := strings.Split(f[2], "/")
	if len(p) != 4 {
		return record{}, false
	}
	i, err := strconv.Atoi(p[3])
	if err != nil {
		return record{}, false
	}
	return record{at: at, process: f[1], key: Key{Zone: p[0], Offer: p[1], Billing: catalog.BillingPeriod(p[2])}, index: i}, true
}

// records are nc's slot records.
func records(nc *v1alpha1.ScalewayElasticMetalNodeClass) map[string]record {
	out := map[string]record{}
	for k, v := range nc.Annotations {
		if !strings.HasPrefix(k, AnnotationPrefix) {
			continue
		}
		if r, ok := parseRecord(v); ok {
			out[k] = r
		}
	}
	return out
}

// processID names this controller process in the records.
func (c *Controller) processID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.process == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		c.process = hex.EncodeToString(b)
	}
	return c.process
}

func (c *Controller) settle() time.Duration {
	return c.API.Config().OrderSettle
}

// othersInFlight are the slot tags another process recorded on nc within
// the settle window that the pool listing does not show (listedSlots).
func (c *Controller) othersInFlight(nc *v1alpha1.ScalewayElasticMetalNodeClass, listedSlots map[string]bool) map[string]bool {
	out := map[string]bool{}
	now, me := c.clock().Now(), c.processID()
	for _, r := range records(nc) {
		tag := SlotTag(nc.Name, r.key, r.index)
		if r.process == me || listedSlots[tag] || now.Sub(r.at) >= c.settle() {
			continue
		}
		out[tag] = true
	}
	return out
}

// recordSlot writes slot's record on nc before its order is sent (a merge
// of that one annotation: the other slots' records are left alone).
// Without the record nothing is sent.
func (c *Controller) recordSlot(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, slot Slot) error {
	k := slot.Key
	v := fmt.Sprintf("%s %s %s/%s/%s/%d", c.clock().Now().UTC().Format(time.RFC3339Nano), c.processID(), k.Zone, k.Offer, k.Billing, slot.Index)
	return c.patchRecords(ctx, nc, map[string]any{recordKey(k, slot.Index): v})
}

// forget removes the records of nc whose slot a listing shows or whose
// settle window has passed: they say nothing any more.
func (c *Controller) forget(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, listedSlots map[string]bool) error {
	gone := map[string]any{}
	now := c.clock().Now()
	for k, r := range records(nc) {
		if listedSlots[SlotTag(nc.Name, r.key, r.index)] || now.Sub(r.at) >= c.settle() {
			gone[k] = nil
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return c.patchRecords(ctx, nc, gone)
}

// patchRecords merges annotations (nil removes one) into the stored
// NodeClass, and nc becomes the stored object the patch answered with: the
// status patch that follows (setCondition) holds an optimistic lock on its
// resourceVersion, and must not conflict with this pass's own write.
func (c *Controller) patchRecords(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	target := &v1alpha1.ScalewayElasticMetalNodeClass{}
	target.Name = nc.Name
	if err := c.Kube.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("recording warm-pool orders on nodeclass %s: %w", nc.Name, err)
	}
	target.DeepCopyInto(nc)
	return nil
}

// Records are the warm-pool orders another process recorded on NodeClass
// nodeClass within the settle window (spendlimit.Limiter.Records); the
// limiter leaves out those a listing shows.
func (c *Controller) Records(ctx context.Context, nodeClass string) ([]spendlimit.Record, error) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := c.Kube.Get(ctx, client.ObjectKey{Name: nodeClass}, nc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	var out []spendlimit.Record
	now, me := c.clock().Now(), c.processID()
	for _, r := range records(nc) {
		if r.process == me || now.Sub(r.at) >= c.settle() {
			continue
		}
		out = append(out, spendlimit.Record{Tag: SlotTag(nodeClass, r.key, r.index), Zone: r.key.Zone, Offer: r.key.Offer, Billing: r.key.Billing})
	}
	return out, nil
}
