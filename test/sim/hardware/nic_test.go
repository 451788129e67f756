package hardware

import "testing"

// TestNICDriver pins the bandwidth steps: up to 1 Gbit/s igb, up to
// 10 Gbit/s ixgbe, above that mlx5.
func TestNICDriver(t *testing.T) {
	for _, tc := range []struct {
		bw     uint64
		driver string
		speed  int
	}{
		{0, "igb", 1000},
		{1_000_000_000, "igb", 1000},
		{1_000_000_001, "ixgbe", 10000},
		{10_000_000_000, "ixgbe", 10000},
		{25_000_000_000, "mlx5_core", 25000},
	} {
		if d, s := nicDriver(tc.bw); d != tc.driver || s != tc.speed {
			t.Errorf("nicDriver(%d) = %s, %d; want %s, %d", tc.bw, d, s, tc.driver, tc.speed)
		}
	}
}
