package scwsim

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"time"
)

// pnAttachment is a baremetal v3 server private network.
type pnAttachment struct {
	id, zone, projectID, serverID, pnID string
	vlan                                uint32
	status                              string
	ipamIPIDs                           []string
	createdAt, updatedAt                time.Time
	order                               int
}

const privateNetworkOptionName = "Private Network"

func (a *pnAttachment) json() map[string]any {
	return map[string]any{"id": a.id, "project_id": a.projectID, "server_id": a.serverID,
		"private_network_id": a.pnID, "vlan": a.vlan, "status": a.status,
		"created_at": apiTime(a.createdAt), "updated_at": apiTime(a.updatedAt),
		"ipam_ip_ids": orEmpty(a.ipamIPIDs)}
}

// attachable checks a server may join private networks: delivered, not in a
// transient state, with the Private Network option added (and, under
// AttachOnceEnabled, fully enabled). Caller holds mu.
func (s *Sim) attachable(sv *server) *apiError {
	if e := actionable(sv); e != nil {
		return e
	}
	for _, o := range sv.options {
		if rawString(o.raw["name"]) != privateNetworkOptionName {
			continue
		}
		if o.status == "option_status_enable" ||
			o.status == "option_status_enabling" && s.opts.PrivateNetworkAttach == AttachWhileEnabling {
			return nil
		}
	}
	return errPrecondition("attribute_must_be_set", "the server needs the Private Network option enabled")
}

func (s *Sim) checkPN(id string) *apiError {
	if !uuidRE.MatchString(id) {
		return errInvalid("private_network_id", "format", "must be a UUID")
	}
	if len(s.opts.PrivateNetworkIDs) > 0 && !slices.Contains(s.opts.PrivateNetworkIDs, id) {
		return errNotFound("private_network", id)
	}
	return nil
}

// attach creates an attachment; the VLAN differs per server so a client
// must read it from each attachment. Caller holds mu.
func (s *Sim) attach(sv *server, pnID string, ipam []string) *pnAttachment {
	used := map[uint32]bool{}
	for _, a := range s.pns {
		if a.serverID == sv.id {
			used[a.vlan] = true
		}
	}
	h := sha256.Sum256([]byte(sv.id + "/" + pnID))
	vlan := 1000 + binary.BigEndian.Uint32(h[:4])%3000
	for used[vlan] {
		vlan = 1000 + (vlan-1000+1)%3000
	}
	now := s.now()
	s.order++
	a := &pnAttachment{id: newUUID(), zone: sv.zone, projectID: sv.projectID, serverID: sv.id, pnID: pnID,
		vlan: vlan, status: "attaching", ipamIPIDs: append([]string(nil), ipam...), createdAt: now, updatedAt: now,
		order: s.order}
	s.pns[a.id] = a
	s.after(s.opts.Delays.PrivateNetworkAttach, func() {
		if a.status == "attaching" {
			a.status, a.updatedAt = "attached", s.now()
		}
	})
	return a
}

func (s *Sim) detach(a *pnAttachment) {
	a.status, a.updatedAt = "detaching", s.now()
	s.after(s.opts.Delays.PrivateNetworkDetach, func() { delete(s.pns, a.id) })
}

func (s *Sim) attachmentOf(serverID, pnID string) *pnAttachment {
	for _, a := range s.pns {
		if a.serverID == serverID && a.pnID == pnID && a.status != "detaching" {
			return a
		}
	}
	return nil
}

func (s *Sim) addPN(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req struct {
		PrivateNetworkID string   `json:"private_network_id"`
		IpamIPIDs        []string `json:"ipam_ip_ids"`
	}
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.checkPN(req.PrivateNetworkID); e != nil {
		return nil, e
	}
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	if e := s.attachable(sv); e != nil {
		return nil, e
	}
	if s.attachmentOf(sv.id, req.PrivateNetworkID) != nil {
		return nil, errConflict("server is already attached to this private network")
	}
	return s.attach(sv, req.PrivateNetworkID, req.IpamIPIDs).json(), nil
}

func (s *Sim) setPNs(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req struct {
		PerPN map[string]*[]string `json:"per_private_network_ipam_ip_ids"`
	}
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range req.PerPN {
		if e := s.checkPN(id); e != nil {
			return nil, e
		}
	}
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	if e := s.attachable(sv); e != nil {
		return nil, e
	}
	s.detachOthers(sv, req.PerPN)
	return map[string]any{"server_private_networks": s.attachAll(sv, req.PerPN)}, nil
}

// detachOthers starts detaching sv from every private network not in keep.
// Caller holds mu.
func (s *Sim) detachOthers(sv *server, keep map[string]*[]string) {
	for _, a := range s.pns {
		if _, kept := keep[a.pnID]; a.serverID == sv.id && !kept && a.status != "detaching" {
			s.detach(a)
		}
	}
}

// attachAll attaches sv to each private network of perPN it is not on yet,
// with the IPAM IPs given, and answers every attachment in ID order. An
// attachment that exists keeps its IPs. Caller holds mu.
func (s *Sim) attachAll(sv *server, perPN map[string]*[]string) []map[string]any {
	ids := make([]string, 0, len(perPN))
	for id := range perPN {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := []map[string]any{}
	for _, id := range ids {
		a := s.attachmentOf(sv.id, id)
		if a == nil {
			var ipam []string
			if p := perPN[id]; p != nil {
				ipam = *p
			}
			a = s.attach(sv, id, ipam)
		}
		out = append(out, a.json())
	}
	return out
}

func (s *Sim) deletePN(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	a := s.attachmentOf(sv.id, r.PathValue("pn"))
	if a == nil {
		return nil, errNotFound("server_private_network", r.PathValue("pn"))
	}
	s.detach(a)
	return nil, nil
}

func (s *Sim) listPNs(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	less, ok := pnOrder(q.Get("order_by"))
	if !ok {
		return nil, errInvalid("order_by", "constraint", "must be created_at_asc, created_at_desc, updated_at_asc or updated_at_desc")
	}
	zone := r.PathValue("zone")
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*pnAttachment
	for _, a := range s.pns {
		if a.zone == zone && pnMatches(a, q) {
			match = append(match, a)
		}
	}
	sort.Slice(match, func(i, j int) bool { return less(match[i], match[j]) })
	out := []map[string]any{}
	for _, a := range paginate(match, page, size) {
		out = append(out, a.json())
	}
	return map[string]any{"server_private_networks": out, "total_count": len(match)}, nil
}

// pnMatches applies the list filters the API takes: server, private
// network, project, and any one of the IPAM IP IDs given.
func pnMatches(a *pnAttachment, q url.Values) bool {
	if (q.Has("server_id") && q.Get("server_id") != a.serverID) ||
		(q.Has("private_network_id") && q.Get("private_network_id") != a.pnID) ||
		(q.Has("project_id") && q.Get("project_id") != a.projectID) {
		return false
	}
	ids := q["ipam_ip_ids"]
	return len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(a.ipamIPIDs, id) })
}

// pnOrder gives the comparison for an order_by value, false for a value the
// API rejects. Creation order is the default.
func pnOrder(by string) (func(a, b *pnAttachment) bool, bool) {
	switch by {
	case "", "created_at_asc":
		return func(a, b *pnAttachment) bool { return a.order < b.order }, true
	case "created_at_desc":
		return func(a, b *pnAttachment) bool { return a.order > b.order }, true
	case "updated_at_asc":
		return func(a, b *pnAttachment) bool { return a.updatedAt.Before(b.updatedAt) }, true
	case "updated_at_desc":
		return func(a, b *pnAttachment) bool { return a.updatedAt.After(b.updatedAt) }, true
	}
	return nil, false
}

// PrivateNetworks returns the VLAN of each private network attached to a
// server (attaching or attached), keyed by private network ID.
func (s *Sim) PrivateNetworks(serverID string) map[string]uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]uint32{}
	for _, a := range s.pns {
		if a.serverID == serverID && a.status != "detaching" {
			out[a.pnID] = a.vlan
		}
	}
	return out
}
