package erase

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
)

// BenchmarkEraseLoop measures each method on a 4 GiB loop device laid out
// like a Talos disk (EFI 100 MiB, BIOS, BOOT 1000 MiB, META, STATE 100 MiB,
// EPHEMERAL over the rest but metal-iso's 48 MiB at the end), `make bench`
// prints it. Discard on a loop device is hole punching in the backing file,
// as fast as an NVMe's deallocate; overwrite is bound by the disk under the
// backing file, so its MB/s stands for what a real disk sustains.
func BenchmarkEraseLoop(b *testing.B) {
	loopdev.Require(b)
	const size = 4 << 30
	cases := []struct {
		name string
		o    Options
	}{
		{"discard", Options{Method: MethodDiscard}},
		{"overwrite", Options{Method: MethodOverwrite}},
		{"overwrite-full", Options{Method: MethodOverwrite, Full: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				file := filepath.Join(b.TempDir(), "disk.img")
				if err := os.WriteFile(file, nil, 0o600); err != nil {
					b.Fatal(err)
				}
				if err := os.Truncate(file, size); err != nil {
					b.Fatal(err)
				}
				loopdev.Run(b, "sgdisk", "-n1:0:+100M", "-c1:EFI", "-n2:0:+1M", "-c2:BIOS", "-n3:0:+1000M", "-c3:BOOT",
					"-n4:0:+1M", "-c4:META", "-n5:0:+100M", "-c5:STATE", "-n6:0:-48M", "-c6:EPHEMERAL", "-n7:0:0", "-c7:metal-iso", file)
				d := loopdev.AttachFile(b, file, 512)
				b.StartTimer()
				res, err := Disk(context.Background(), d.Path, 0, c.o)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.Seconds, "s/erase")
				b.ReportMetric(float64(res.Bytes)/1e6/res.Seconds, "MB/s")
				b.ReportMetric(float64(res.Bytes)/float64(size)*100, "%erased")
				b.Logf("%s: %s, %d bytes in %.2f s, verified %d bytes, left: %s", c.name, res.Method, res.Bytes, res.Seconds, res.VerifiedBytes, fmt.Sprint(res.Left))
			}
		})
	}
}
