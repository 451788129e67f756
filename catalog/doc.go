// Package catalog turns Scaleway Elastic Metal offers into Karpenter instance types.
//
// It answers from an embedded snapshot (package catalog/snapshot) from the first call, refreshes stock and
// prices from the baremetal v1 ListOffers API (every zone, hourly and monthly, all pages) on an interval with
// jitter, and keeps an unavailable-offerings cache fed by failed orders.
//
// The controller uses it so:
//
//	cat := catalog.New(catalog.Options{Client: scwClient, Logger: log, Registerer: crmetrics.Registry})
//	go cat.Start(ctx)                                            // refresh now, then every 5m ± 20%
//	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(nodePool.Spec.Template.Spec.Requirements...)
//	periods, ok := catalog.BillingPeriodsFor(nodeClassPeriods, reqs) // !ok: return no instance types
//	its, err := cat.InstanceTypes(ctx, catalog.Filter{Zones: zones, BillingPeriods: periods,
//		CommitmentMonths: 12, Kubelet: kubelet, Requirements: reqs})
//	offer, ok := cat.Offer("fr-par-2", "EM-I220E-NVME", catalog.BillingMonthly)  // offer.ID to order
//	cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", catalog.BillingMonthly, catalog.ReasonOutOfStock)
//	cat.ObserveCapacity("EM-I220E-NVME", node.Labels[localdisks.LabelPolicy], node.Status.Capacity) // measured replaces the estimate
//
// # Instance types
//
// One instance type per offer name (hourly and monthly variants of a name are one type) with one offering per
// (zone, billing period). Capacity: cpu = hardware threads; memory = the offer's memory minus an estimate of
// what firmware and the kernel keep (2% + 256 MiB) until a node of that offer reports its real capacity;
// ephemeral-storage = the smallest disk minus Talos' system partitions; pods = kubelet maxPods (110);
// nvidia.com/gpu for GPU offers. Overhead: the NodeClass kubelet kubeReserved/systemReserved/evictionHard, with
// defaults (kube-reserved on the usual CPU curve and 11 MiB/pod + 255 MiB; Talos' system-reserved 50m/192Mi;
// eviction memory.available 100Mi, nodefs.available 10%).
//
// Requirements carry every Karpenter well-known label (instance-type, arch amd64/arm64/riscv64 from the CPU
// name, "unknown" for a CPU not recognised, never guessed amd64; os linux, zone, region, capacity-type on-demand, windows-build DoesNotExist) and the labels under
// karpenter-scaleway-em.io/ listed in labels.go, registered as well-known so NodePools can select on them.
// Labels an offer does not have (gpu-model and gpu-count on CPU offers) are DoesNotExist.
//
// # Billing period and price
//
// Offerings carry karpenter-scaleway-em.io/billing-period=hourly|monthly. Price is per hour: hourly offers
// their price per hour; monthly offers price-per-month / 730 plus their one-month fee spread over
// Filter.CommitmentMonths. Hourly is the default: a Filter without BillingPeriods allows hourly only, and
// BillingPeriodsFor keeps monthly only when the NodeClass allows it and the NodePool asks for it, so a
// server with a monthly fee is never ordered by accident.
//
// # Availability
//
// Available = offer enabled, stock not "empty", the offering not marked unavailable, and the zone's data real
// (recorded or live): zones the embedded snapshot only derives (see catalog/snapshot/README.md) show their
// offerings as unavailable until their first successful refresh, because their IDs and stock are invented.
// MarkUnavailable hides
// an offering for OutOfStockTTL (3m) or QuotaTTL (30m); marks expire lazily on the next call.
//
// # Caching
//
// InstanceTypes caches its result per normalized Filter and rebuilds only when the generation changes: new
// offer data (compared by content), a mark or an expiry, a measured capacity. The returned types are shared.
//
// # Metrics
//
// karpenter_scaleway_em_catalog_refresh_total{zone,billing_period,result},
// _refresh_duration_seconds{result}, _last_successful_refresh_timestamp_seconds{zone},
// _unavailable_marks_total{reason}, _unavailable_expiries_total{reason}, _unavailable_offerings{reason},
// _offers{zone,billing_period,stock}, _zone_data_origin{zone,origin}, _instance_type_builds_total, and
// karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type,capacity_type,zone,billing_period}
// (karpenter-provider-aws's metric, plus billing_period).
//
// Tests: go test -count=1 -race ./catalog/...   Benchmarks: go test -run '^$' -bench . ./catalog/
package catalog

//go:generate go run ./cmd/gen-snapshot -recordings ../test/fixtures/scaleway/baremetal-api-recordings.json -out snapshot/offers.json
