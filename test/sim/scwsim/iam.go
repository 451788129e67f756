package scwsim

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// sshKey is an IAM v1alpha1 SSH key.
type sshKey struct {
	id, name, publicKey, fingerprint string
	projectID, orgID                 string
	disabled                         bool
	createdAt, updatedAt             time.Time
	order                            int
}

func (k *sshKey) json() map[string]any {
	return map[string]any{"id": k.id, "name": k.name, "public_key": k.publicKey, "fingerprint": k.fingerprint,
		"created_at": apiTime(k.createdAt), "updated_at": apiTime(k.updatedAt), "organization_id": k.orgID,
		"project_id": k.projectID, "disabled": k.disabled}
}

func (s *Sim) createKey(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req struct {
		Name      string `json:"name"`
		PublicKey string `json:"public_key"`
		ProjectID string `json:"project_id"`
	}
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	line := strings.TrimSpace(req.PublicKey)
	if line == "" {
		return nil, errInvalid("public_key", "required", "")
	}
	pk, comment, _, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil || len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errInvalid("public_key", "format", "must be one OpenSSH public key (ssh-ed25519, ssh-rsa, ecdsa-sha2-*)")
	}
	if len(req.Name) > 1000 {
		return nil, errInvalid("name", "constraint", "max length is 1000")
	}
	project := req.ProjectID
	if project == "" {
		project = s.opts.ProjectID
	}
	if !uuidRE.MatchString(project) {
		return nil, errInvalid("project_id", "format", "must be a UUID")
	}
	if !s.projectAllowed(project) {
		return nil, errPermission("ssh_key", "write")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keyOrder++
	name := req.Name
	if name == "" {
		name = "key-" + strconv.Itoa(s.keyOrder)
	}
	bits := ""
	if ck, ok := pk.(ssh.CryptoPublicKey); ok {
		bits = keyBits(ck) + " "
	}
	now := s.now()
	k := &sshKey{id: newUUID(), name: name, publicKey: line,
		fingerprint: fmt.Sprintf("%s%s %s(%s)", bits, ssh.FingerprintSHA256(pk), commentPart(comment), pk.Type()),
		projectID:   project, orgID: s.opts.OrganizationID, createdAt: now, updatedAt: now, order: s.keyOrder}
	s.keys[k.id] = k
	return k.json(), nil
}

func commentPart(c string) string {
	if c == "" {
		return ""
	}
	return c + " "
}

func keyBits(ck ssh.CryptoPublicKey) string {
	switch k := ck.CryptoPublicKey().(type) {
	case interface{ Size() int }: // *rsa.PublicKey
		return strconv.Itoa(k.Size() * 8)
	default:
		return "256"
	}
}

func (s *Sim) keyOf(r *http.Request) (*sshKey, *apiError) {
	k := s.keys[r.PathValue("id")]
	if k == nil {
		return nil, errNotFound("ssh_key", r.PathValue("id"))
	}
	return k, nil
}

func (s *Sim) getKey(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, e := s.keyOf(r)
	if e != nil {
		return nil, e
	}
	return k.json(), nil
}

func (s *Sim) updateKey(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req struct {
		Name     *string `json:"name"`
		Disabled *bool   `json:"disabled"`
	}
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, e := s.keyOf(r)
	if e != nil {
		return nil, e
	}
	if req.Name != nil {
		k.name = *req.Name
	}
	if req.Disabled != nil {
		k.disabled = *req.Disabled
	}
	k.updatedAt = s.now()
	return k.json(), nil
}

func (s *Sim) deleteKey(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, e := s.keyOf(r)
	if e != nil {
		return nil, e
	}
	delete(s.keys, k.id)
	return nil, nil
}

func (s *Sim) listKeys(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	less, ok := keyOrder(q.Get("order_by"))
	if !ok {
		return nil, errInvalid("order_by", "constraint", "unknown order")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*sshKey
	for _, k := range s.keys {
		if keyMatches(k, q) {
			match = append(match, k)
		}
	}
	sort.Slice(match, func(i, j int) bool { return less(match[i], match[j]) })
	out := []map[string]any{}
	for _, k := range paginate(match, page, size) {
		out = append(out, k.json())
	}
	return map[string]any{"ssh_keys": out, "total_count": len(match)}, nil
}

// keyMatches applies the list filters the API takes: a name substring,
// the project, the organization and the disabled flag.
func keyMatches(k *sshKey, q url.Values) bool {
	return (!q.Has("name") || strings.Contains(k.name, q.Get("name"))) &&
		(!q.Has("project_id") || q.Get("project_id") == k.projectID) &&
		(!q.Has("organization_id") || q.Get("organization_id") == k.orgID) &&
		(!q.Has("disabled") || q.Get("disabled") == strconv.FormatBool(k.disabled))
}

// keyOrder gives the comparison for an order_by value, false for a value the
// API rejects. Creation order is the default.
func keyOrder(by string) (func(a, b *sshKey) bool, bool) {
	switch by {
	case "", "created_at_asc":
		return func(a, b *sshKey) bool { return a.order < b.order }, true
	case "created_at_desc":
		return func(a, b *sshKey) bool { return a.order > b.order }, true
	case "updated_at_asc":
		return func(a, b *sshKey) bool { return a.updatedAt.Before(b.updatedAt) }, true
	case "updated_at_desc":
		return func(a, b *sshKey) bool { return a.updatedAt.After(b.updatedAt) }, true
	case "name_asc":
		return func(a, b *sshKey) bool { return a.name < b.name }, true
	case "name_desc":
		return func(a, b *sshKey) bool { return a.name > b.name }, true
	}
	return nil, false
}
