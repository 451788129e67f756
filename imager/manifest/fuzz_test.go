package manifest

import "testing"

// A manifest comes from a bucket others may write to: Parse must refuse,
// never crash on, anything, and what it accepts must encode and parse back.
func FuzzParse(f *testing.F) {
	good, err := valid().Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"schemaVersion":1}`))
	f.Add([]byte(`{"schemaVersion":1,"files":[{}]} trailing`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatalf("a manifest Parse accepted does not encode: %v", err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("a manifest Parse accepted does not parse again: %v\n%s", err, again)
		}
	})
}
