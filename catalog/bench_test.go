package catalog

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var allZonesBoth = Filter{BillingPeriods: BillingPeriods, CommitmentMonths: 12}

// BenchmarkInstanceTypes measures InstanceTypes for every zone and both billing periods: cached (the common
// case: nothing changed since the last call) and cold (a rebuild, as after a refresh or a mark).
func BenchmarkInstanceTypes(b *testing.B) {
	b.Run("cached", func(b *testing.B) {
		c := newEnv(b, false).cat
		mustTypes(b, c, allZonesBoth)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := c.InstanceTypes(context.Background(), allZonesBoth); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		c := newEnv(b, false).cat
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			c.mu.Lock()
			c.gen++ // what a refresh with new data, a mark or an expiry does
			c.mu.Unlock()
			its, err := c.InstanceTypes(context.Background(), allZonesBoth)
			if err != nil || len(its) == 0 {
				b.Fatal(err)
			}
		}
	})
}

// TestConcurrentAccess runs readers, marks, measurements and refreshes at once; run with -race.
func TestConcurrentAccess(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 4 {
		wg.Go(func() {
			for j := range 30 {
				f := Filter{Zones: []string{"fr-par-2", "nl-ams-1"}, BillingPeriods: BillingPeriods, CommitmentMonths: 1 + (i+j)%3}
				its, err := e.cat.InstanceTypes(ctx, f)
				if err != nil {
					errs <- err
					return
				}
				for _, it := range its {
					_ = it.Allocatable() // Karpenter computes this lazily on shared types
					_ = it.Offerings.Available().Cheapest()
				}
				e.cat.Offer("fr-par-2", "EM-I220E-NVME", BillingHourly)
			}
		})
	}
	wg.Go(func() {
		for j := range 30 {
			e.cat.MarkUnavailable("fr-par-2", fmt.Sprintf("EM-B%d20E-NVME", 2+j%4), BillingHourly, ReasonOutOfStock)
			e.clock.Step(DefaultOutOfStockTTL / 4)
		}
	})
	wg.Go(func() {
		for j := range 30 {
			e.cat.ObserveCapacity("EM-I220E-NVME", "", corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(int64(120+j)<<30, resource.BinarySI)})
		}
	})
	wg.Go(func() {
		for range 3 {
			if err := e.cat.Refresh(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(e.cat.cache); n == 0 || n > maxCacheEntries {
		t.Errorf("cache holds %d entries", n)
	}
}
