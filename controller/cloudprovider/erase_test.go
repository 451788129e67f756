package cloudprovider_test

import (
	"bytes"
	"os"
	"regexp"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// A monthly node's server is kept as a spare: its disk holds that node's
// machine config (the simulated Talos keeps it in STATE, as Talos does),
// tokens included. The spare is neither taken nor offered until the
// pre-imager, in its keyed rescue boot, ran the real em-imager erase on
// every disk, then wrote the image; afterwards no token of the old config
// is anywhere on any of the machine's disks, and the erase is recorded on
// the server.
func TestEraseKeptSpareHoldsNoSecretOfItsNode(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.monthlySpare()
	tree, err := e.w.Machines.Hardware(id)
	if err != nil {
		t.Fatal(err)
	}
	config, err := diskimage.ReadState(tree.DevicePath(tree.InstallDisk().Name))
	if err != nil || len(config) == 0 {
		t.Fatalf("the former node's config in STATE: %d bytes, %v", len(config), err)
	}
	var secrets [][]byte
	for _, m := range regexp.MustCompile(`(?m)(?:token|secret|key): *([A-Za-z0-9+/=._-]{16,})$`).FindAllSubmatch(config, -1) {
		secrets = append(secrets, m[1])
	}
	if len(secrets) == 0 {
		t.Fatalf("no token in the former node's config:\n%s", config)
	}
	found := func() []string {
		var hits []string
		for _, d := range tree.Spec.Disks {
			b, err := os.ReadFile(tree.DevicePath(d.Name))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if bytes.Contains(b, s) {
					hits = append(hits, d.Name+": "+string(s[:8])+"…")
				}
			}
		}
		return hits
	}
	if len(found()) == 0 {
		t.Fatal("the former node's secrets are not on its disks before the erase: the test proves nothing")
	}
	if srv := e.server(id); !spare.ErasePending(srv) || spare.Takeable(srv) {
		t.Fatalf("kept spare: erase pending %v, takeable %v (tags %v)", spare.ErasePending(srv), spare.Takeable(srv), srv.Tags)
	}

	// The reserved offerings are told the moment the erase is recorded
	// (the spare is takeable from then on), not after the image write
	// that follows it.
	writes := e.imagerRuns(id, "write")
	type told struct {
		erased bool
		writes int
	}
	var first *told
	changed := e.p.Spares.Changed
	e.p.Spares.Changed = func(z scw.Zone) {
		if first == nil {
			v, _ := scaleway.TagValue(e.server(id).Tags, install.TagErased)
			first = &told{erased: v != "", writes: e.imagerRuns(id, "write")}
		}
		changed(z)
	}
	e.preImage(e.ctx)
	switch {
	case first == nil:
		t.Fatal("the reserved offerings were never told the spare became takeable")
	case !first.erased || first.writes != writes:
		t.Fatalf("the reserved offerings were first told with the erase recorded %v and %d image writes since, want the erase recorded and none (told before the image write)", first.erased, first.writes-writes)
	}
	srv := e.server(id)
	if spare.ErasePending(srv) || !spare.Takeable(srv) || !spare.PreImaged(srv, e.currentImage()) {
		t.Fatalf("after pre-imaging: erase pending %v, takeable %v (tags %v)", spare.ErasePending(srv), spare.Takeable(srv), srv.Tags)
	}
	if v, _ := scaleway.TagValue(srv.Tags, install.TagErased); v == "" {
		t.Fatalf("no %s tag: %v", install.TagErased, srv.Tags)
	}
	if n := e.imagerRuns(id, "erase"); n != 1 {
		t.Fatalf("%d em-imager erase runs, want 1", n)
	}
	if hits := found(); len(hits) > 0 {
		t.Fatalf("the former node's secrets are still on the spare's disks: %v", hits)
	}
}
