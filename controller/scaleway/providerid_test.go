package scaleway

import "testing"

func TestProviderID(t *testing.T) {
	id := ProviderID("fr-par-2", serverID)
	if id != "scaleway-em://fr-par-2/"+serverID {
		t.Fatal(id)
	}
	z, s, err := ParseProviderID(id)
	if err != nil || z != "fr-par-2" || s != serverID {
		t.Fatalf("%s %s %v", z, s, err)
	}
	for _, bad := range []string{"", "aws:///i-1", "scaleway-em://fr-par-2", "scaleway-em:///x", "scaleway-em://fr-par-2/", "scaleway-em://mars/x", "scaleway-em://fr-par-2/a/b"} {
		if _, _, err := ParseProviderID(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
