package preimage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// A spare whose erase fails (here the whole pre-imaging, as install's
// PreImage fails when em-imager erase does) keeps its erase-pending tag: it
// is neither taken nor offered, the failure is backed off and the next
// sweep past the backoff tries again.
func TestEraseFailureKeepsTheSpareOutAndIsRetried(t *testing.T) {
	ctx := context.Background()
	const zone = scw.Zone("fr-par-2")
	sim, api, kube, c1, keeper, sha := preimageEnv(t)
	changed := 0
	keeper.Changed = func(scw.Zone) { changed++ }
	im := &imager{err: errors.New("em-imager erase: erase_unverified: /dev/sda reads back data")}
	c := &Controller{Kube: kube, API: api, Spares: keeper, Imager: im, Images: fixedImages{sha}, Log: testlog.New(t), Interval: time.Hour}

	srv := readySpare(t, sim, api, c1, scaleway.Tag(install.TagErasePending, "due"))
	fresh := func() bool {
		t.Helper()
		got, err := api.GetServer(ctx, zone, srv.ID)
		if err != nil {
			t.Fatal(err)
		}
		srv = got
		return spare.Takeable(got)
	}
	if _, err := c.ImageSpare(ctx, srv); err == nil {
		t.Fatal("the failing erase reported no error")
	}
	if fresh() || !spare.ErasePending(srv) || changed != 0 {
		t.Fatalf("after a failed erase: takeable %v, tags %v, cache told %d times", fresh(), srv.Tags, changed)
	}
	if c.candidate(srv) {
		t.Fatal("tried again before its backoff")
	}
	c.mu.Lock()
	c.failed[srv.ID] = failure{count: 1, next: time.Now().Add(-time.Second)}
	c.mu.Unlock()
	if !c.candidate(srv) {
		t.Fatal("not tried again after its backoff")
	}
	im.err = nil
	if wrote, err := c.ImageSpare(ctx, srv); err != nil || !wrote || changed != 1 {
		t.Fatalf("the retry: wrote %v, %v; cache told %d times", wrote, err, changed)
	}
}
