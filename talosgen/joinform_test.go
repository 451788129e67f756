package talosgen

import (
	"strings"
	"testing"
)

// noJoinMaterial picks the message a user sees for a secret with no usable
// form; a half-written Kubernetes form must point at the missing CA.
func TestNoJoinMaterialNamesWhatIsMissing(t *testing.T) {
	for name, tc := range map[string]struct {
		keys joinKeys
		want string
	}{
		"empty":               {joinKeys{}, "no join material"},
		"capi not talos":      {joinKeys{capiValue: true}, "bootstrap data format is not talosconfig"},
		"token only":          {joinKeys{token: true}, KeyKubernetesCA},
		"endpoint only":       {joinKeys{endpoint: true}, KeyKubernetesCA},
		"capi format no data": {joinKeys{capiTalos: true}, "no join material"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := noJoinMaterial("s", tc.keys); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("noJoinMaterial(%+v) = %v, want an error containing %q", tc.keys, err, tc.want)
			}
		})
	}
}

func TestReadJoinKeysIgnoresWhitespace(t *testing.T) {
	k := readJoinKeys(map[string][]byte{
		KeyWorkerConfig: []byte("  \n"),
		KeyCAPIFormat:   []byte(" talosconfig\n"),
		KeyToken:        []byte("abcdef.0123456789abcdef"),
	})
	if want := (joinKeys{capiTalos: true, token: true}); k != want {
		t.Fatalf("readJoinKeys = %+v, want %+v", k, want)
	}
}
