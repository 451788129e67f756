package scaleway

import (
	"fmt"
	"strings"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/scaleway/scaleway-sdk-go/validation"
)

// ProviderIDScheme prefixes the Kubernetes providerID of an EM node.
const ProviderIDScheme = "scaleway-em://"

// ProviderID renders "scaleway-em://<zone>/<server-id>".
func ProviderID(zone scw.Zone, serverID string) string {
	return ProviderIDScheme + string(zone) + "/" + serverID
}

// ParseProviderID splits a providerID made by ProviderID, naming what is
// wrong when it is not one.
func ParseProviderID(providerID string) (scw.Zone, string, error) {
	rest, ok := strings.CutPrefix(providerID, ProviderIDScheme)
	if !ok {
		return "", "", fmt.Errorf("providerID %q does not start with %s", providerID, ProviderIDScheme)
	}
	zone, id, ok := strings.Cut(rest, "/")
	if !ok || zone == "" || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("providerID %q is not %s<zone>/<server-id>", providerID, ProviderIDScheme)
	}
	if !validation.IsZone(zone) {
		return "", "", fmt.Errorf("providerID %q: %q is not a zone like fr-par-2", providerID, zone)
	}
	return scw.Zone(zone), id, nil
}
