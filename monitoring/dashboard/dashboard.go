// Package dashboard is the provider's Grafana dashboard, written as code with
// the Grafana Foundation SDK. The chart ships its JSON
// (charts/karpenter-scaleway-em/dashboards/karpenter-scaleway-em.json) as a
// ConfigMap for Grafana's dashboard sidecar; `go generate ./monitoring/...`
// (or `make dashboards`) rewrites it, and test/chart checks it is current.
// test/monitoring runs every query against a real Prometheus scraping the
// controller.
package dashboard

//go:generate go run ./cmd/gen-dashboard -out ../../charts/karpenter-scaleway-em/dashboards/karpenter-scaleway-em.json

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID of the dashboard: stable, so links and bookmarks survive upgrades.
const UID = "karpenter-scaleway-em"

// Datasource is the dashboard's data source variable.
const Datasource = "datasource"

var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + Datasource + "}")}

// query is one PromQL target; legend is Grafana's legend format.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Datasource(ds).Range()
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

// graph is a time series panel of the given width (of 24) and unit.
func graph(title, description, unit string, width uint32, stacked bool, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).Datasource(ds).
		Height(8).Span(width).Min(0).FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true))
	if stacked {
		p = p.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
	}
	for i, q := range queries {
		p = p.WithTarget(q.RefId(string(rune('A' + i))))
	}
	return p
}

// single is a stat panel showing one number.
func single(title, description, unit string, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Unit(unit).Datasource(ds).
		Height(4).Span(6).GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		WithTarget(q.Instant().RefId("A"))
}

// Build builds the dashboard.
func Build() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("Karpenter on Scaleway Elastic Metal").
		Uid(UID).
		Description("Bare-metal nodes Karpenter makes on Scaleway Elastic Metal: installs by phase, imaging, the Scaleway API, spend and commitments, spares. Generated from monitoring/dashboard; edit the Go code, not the JSON.").
		Tags([]string{"karpenter", "scaleway", "elastic-metal"}).
		Refresh("1m").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder(Datasource).Label("Data source").Type("prometheus"))

	b = b.WithRow(dashboard.NewRowBuilder("Spend")).
		WithPanel(single("Spend per hour", "What the cluster's Elastic Metal servers cost per hour: hourly servers at their price, monthly ones amortised over 730 h.",
			"currencyEUR", query(`sum(karpenter_scaleway_em_spend_hourly_eur)`, ""))).
		WithPanel(single("Monthly commitment", "Monthly servers' price for the month in progress, plus setup fees of those ordered this calendar month.",
			"currencyEUR", query(`sum(karpenter_scaleway_em_spend_monthly_commitment_eur)`, ""))).
		WithPanel(single("Idle spares per hour", "What monthly spares (kept for reuse, running no node) cost per hour.",
			"currencyEUR", query(`sum(karpenter_scaleway_em_spend_hourly_eur{usage="spare"}) or vector(0)`, ""))).
		WithPanel(single("Servers without a price", "Servers whose offer the catalogue no longer lists: the spend leaves them out.",
			"short", query(`sum(karpenter_scaleway_em_spend_unpriced_servers) or vector(0)`, ""))).
		WithPanel(graph("Spend per hour by NodeClass", "Stacked by NodeClass and usage (node, spare).", "currencyEUR", 12, true,
			query(`sum by (nodeclass, usage) (karpenter_scaleway_em_spend_hourly_eur)`, "{{nodeclass}} {{usage}}"))).
		WithPanel(graph("Monthly commitment by NodeClass", "Monthly prices and this month's setup fees, by NodeClass and usage.", "currencyEUR", 12, true,
			query(`sum by (nodeclass, usage) (karpenter_scaleway_em_spend_monthly_commitment_eur)`, "{{nodeclass}} {{usage}}"))).
		WithPanel(graph("Cheapest offerings", "The ten cheapest offerings of the catalogue by hourly price estimate (monthly: price over 730 h plus the setup fee over one month).", "currencyEUR", 24, false,
			query(`bottomk(10, min by (instance_type, billing_period) (karpenter_cloudprovider_instance_type_offering_price_estimate))`, "{{instance_type}} {{billing_period}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Nodes and installs")).
		WithPanel(graph("Servers by phase", "The cluster's servers by install phase (ordered, rescue, imaging, booting, joined) and spares.", "short", 12, true,
			query(`sum by (phase) (karpenter_scaleway_em_servers)`, "{{phase}}"))).
		WithPanel(graph("Nodes", "Nodes in Karpenter's cluster state.", "short", 12, false,
			query(`max(karpenter_cluster_state_node_count)`, "nodes"))).
		WithPanel(graph("Time per phase (p90)", "90th percentile of the time an install spends in each phase, successful runs.", "s", 12, false,
			query(`histogram_quantile(0.9, sum by (le, phase) (rate(karpenter_scaleway_em_install_phase_duration_seconds_bucket{result="ok"}[$__rate_interval])))`, "{{phase}}"))).
		WithPanel(graph("Install errors (1 h)", "Phase runs that ended in an error over the last hour, by phase.", "short", 12, false,
			query(`sum by (phase) (increase(karpenter_scaleway_em_install_phase_duration_seconds_count{result="error"}[1h]))`, "{{phase}}"))).
		WithPanel(graph("Imaging throughput", "Raw image MB per second em-imager writes: median per install, and all installs together.", "MBs", 12, false,
			query(`histogram_quantile(0.5, sum by (le) (rate(karpenter_scaleway_em_imager_throughput_mbytes_per_second_bucket[$__rate_interval])))`, "median per install"),
			query(`sum(rate(karpenter_scaleway_em_imager_raw_bytes_total[$__rate_interval])) / 1e6`, "all installs"))).
		WithPanel(graph("Installs waiting on the poller", "Installs waiting for a server state change, by zone (one ListServers per zone serves all).", "short", 12, false,
			query(`sum by (zone) (karpenter_scaleway_em_api_poller_waiters)`, "{{zone}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Scaleway API")).
		WithPanel(graph("Calls by result", "API call attempts per second by result.", "reqps", 12, true,
			query(`sum by (result) (rate(karpenter_scaleway_em_api_calls_total[$__rate_interval]))`, "{{result}}"))).
		WithPanel(graph("Errors by operation", "Attempts that did not succeed, by operation and result (throttled: 429; unauthorized/permission: the API key).", "reqps", 12, false,
			query(`sum by (op, result) (rate(karpenter_scaleway_em_api_calls_total{result!="ok"}[$__rate_interval]))`, "{{op}} {{result}}"))).
		WithPanel(graph("Call duration (p95)", "95th percentile of an attempt's duration, rate-limit waits included.", "s", 12, false,
			query(`histogram_quantile(0.95, sum by (le, op) (rate(karpenter_scaleway_em_api_call_duration_seconds_bucket[$__rate_interval])))`, "{{op}}"))).
		WithPanel(graph("Retries", "Retries by the class of the failure that caused them.", "reqps", 12, false,
			query(`sum by (reason) (rate(karpenter_scaleway_em_api_retries_total[$__rate_interval]))`, "{{reason}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Catalogue and housekeeping")).
		WithPanel(graph("Catalogue age", "Seconds since each zone's offers were last refreshed.", "s", 12, false,
			query(`time() - max by (zone) (karpenter_scaleway_em_catalog_last_successful_refresh_timestamp_seconds)`, "{{zone}}"))).
		WithPanel(graph("Offers by stock", "Enabled offers by stock level (all zones, both billing periods).", "short", 12, true,
			query(`sum by (stock) (karpenter_scaleway_em_catalog_offers)`, "{{stock}}"))).
		WithPanel(graph("Unavailable offerings", "Offerings hidden after an order failed for stock or quota.", "short", 8, false,
			query(`sum by (reason) (karpenter_scaleway_em_catalog_unavailable_offerings)`, "{{reason}}"))).
		WithPanel(graph("Servers released by garbage collection (1 h)", "Servers no NodeClaim used, by reason: spares past their lifetime, or leaks (failed Creates, duplicates).", "short", 8, false,
			query(`sum by (reason) (increase(karpenter_scaleway_em_leaked_servers_collected_total[1h]))`, "{{reason}}"))).
		WithPanel(graph("Leader", "1 on the replica that holds the lease (only the leader orders, installs and collects).", "short", 8, false,
			query(`max by (name) (leader_election_master_status)`, "{{name}}")))
	d, err := b.Build()
	if err != nil {
		return d, err
	}
	// Grafana wants panel IDs unique within a dashboard; number them in order.
	for i := range d.Panels {
		id := uint32(i + 1)
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
	return d, nil
}

// JSON is the dashboard as the chart ships it: indented, with a final newline.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, fmt.Errorf("building the dashboard: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Query is one PromQL expression of a dashboard panel.
type Query struct {
	Panel string
	Expr  string
}

// Queries reads every panel's PromQL from a dashboard's JSON (rows' panels
// included).
func Queries(dashboardJSON []byte) ([]Query, error) {
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var root struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &root); err != nil {
		return nil, err
	}
	var out []Query
	var walk func([]json.RawMessage) error
	walk = func(raw []json.RawMessage) error {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return err
			}
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, Query{Panel: p.Title, Expr: t.Expr})
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(root.Panels)
}
