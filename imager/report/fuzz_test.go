package report

import (
	"encoding/json"
	"testing"
)

// The controller parses what a rescue host prints: Parse must refuse, never
// crash on, anything, and what it accepts must survive a round trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"command":"write","ok":true,"imager":"t","nics":[],"disk":{"path":"/dev/nvme0n1","sizeBytes":1,"logicalSectorSize":512,"rotational":false,"reason":"x"}}`,
		`{"version":1,"command":"write","ok":false,"imager":"t","nics":[],"error":{"code":"digest_mismatch","message":"sha256 differs"}}`,
		`{"version":1,"command":"write-config","ok":true,"imager":"t","nics":[],"config":{"partition":"5","sha256":"ab","verified":true}}`,
		`{"version":1,"command":"inspect","ok":true,"imager":"t","nics":[{"name":"eth0","mac":"02:00:00:00:00:01","linkUp":true}],"disks":[{"path":"/dev/sda"}],"timings":{"rawMBps":1}}`,
		`{"version":1,"command":"erase","ok":true,"imager":"t","nics":[],"erased":[{"path":"/dev/nvme0n1","sizeBytes":1,"method":"discard","bytes":1,"seconds":0.5,"verified":true,"verifiedBytes":1,"complete":true,"oldPartitions":6}]}`,
		`{"version":0}`, `null`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if r == nil || (!r.OK && r.Error == nil) {
			t.Fatalf("Parse accepted %q as %+v", b, r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("a report Parse accepted does not parse again: %v\n%s", err, again)
		}
	})
}
