package dashboard

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	sdkdashboard "github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const shipped = "../../charts/karpenter-scaleway-em/dashboards/karpenter-scaleway-em.json"

// The chart ships what the code builds.
func TestShippedDashboardIsCurrent(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what monitoring/dashboard builds: run `make dashboards` (go generate ./monitoring/...)", shipped)
	}
}

// The JSON reads back with the SDK's own types (what Grafana's schema
// says), every panel has a unique ID, and every query names its data source.
func TestDashboardIsWellFormed(t *testing.T) {
	b, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var d sdkdashboard.Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard does not unmarshal into the SDK's Dashboard: %v", err)
	}
	if d.Uid == nil || *d.Uid != UID {
		t.Errorf("uid %v, want %s", d.Uid, UID)
	}
	ids := map[uint32]bool{}
	for _, p := range d.Panels {
		var id uint32
		switch {
		case p.Panel != nil && p.Panel.Id != nil:
			id = *p.Panel.Id
		case p.RowPanel != nil:
			id = p.RowPanel.Id
		}
		if id == 0 || ids[id] {
			t.Errorf("panel ID %d missing or repeated", id)
		}
		ids[id] = true
	}
	qs, err := Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("only %d queries found", len(qs))
	}
	if n := strings.Count(string(b), `"uid": "${datasource}"`); n < len(qs) {
		t.Errorf("%d data source references for %d queries", n, len(qs))
	}
	for _, q := range qs {
		if !strings.Contains(q.Expr, "karpenter_") && !strings.Contains(q.Expr, "leader_election_") {
			t.Errorf("panel %q queries %q, none of the provider's or Karpenter's metrics", q.Panel, q.Expr)
		}
	}
}
