package talosapi

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestEvictionQuantity pins how a hard eviction threshold is read: a
// quantity as is, a percentage of the capacity, anything else a refused join.
func TestEvictionQuantity(t *testing.T) {
	capacity := resource.MustParse("1000Mi")
	for _, tc := range []struct {
		v      string
		want   int64
		reject bool
	}{
		{v: "100Mi", want: 100 << 20},
		{v: "10%", want: 100 << 20},
		{v: "0%", want: 0},
		{v: "x%", reject: true},
		{v: "lots", reject: true},
	} {
		q, err := evictionQuantity("memory.available", tc.v, capacity)
		if tc.reject {
			if !errors.Is(err, ErrJoinRejected) {
				t.Errorf("%q: err %v, want a join rejection", tc.v, err)
			}
			continue
		}
		if err != nil || q.Value() != tc.want {
			t.Errorf("%q: %v, %v; want %d", tc.v, q.Value(), err, tc.want)
		}
	}
}
