package scwsim

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Server statuses (the API's enum strings).
const (
	stOrdered    = "ordered"
	stDelivering = "delivering"
	stReady      = "ready"
	stStopping   = "stopping"
	stStopped    = "stopped"
	stStarting   = "starting"
	stError      = "error"
	stDeleting   = "deleting"
	stLocked     = "locked"
	stOutOfStock = "out_of_stock"
)

const serverResource = "baremetal_server"

type server struct {
	id, zone, name, description string
	projectID, orgID            string
	tags                        []string
	offer                       *offer
	status                      string
	bootType                    string
	ping                        string
	createdAt, updatedAt        time.Time
	order                       int
	ipsListed                   bool // the API lists the IPs (Options.ReadyIPs)
	settled                     bool // reverse DNS active and ping up after delivery (Delays.Settle)
	holdsStock                  bool
	powered                     bool // the Host runs an OS (Boot queued, no PowerOff since)
	install                     *serverInstall
	options                     []*serverOption
	protected                   bool
	userData                    json.RawMessage
	rescueUser                  string // rescue_server.user of its rescue boots (Options.RescueUser)
	rescuePassword              string // of the current (or last) rescue boot: new at each
	machine                     Machine
	ipIDs                       [2]string
	gen                         int    // bumped by every action: stale timers do nothing
	stuck                       func() // the transition a stuck fault holds back
	host                        *hostQueue
}

type serverInstall struct {
	OsID               string          `json:"os_id"`
	Hostname           string          `json:"hostname"`
	SSHKeyIDs          []string        `json:"ssh_key_ids"`
	Status             string          `json:"status"`
	User               string          `json:"user"`
	ServiceUser        string          `json:"service_user"`
	ServiceURL         string          `json:"service_url"`
	PartitioningSchema json.RawMessage `json:"partitioning_schema"`
}

type serverOption struct {
	id     string
	raw    map[string]json.RawMessage // id, name, manageable and the kind object
	status string
}

// newRescuePassword is the password of one rescue boot, kept for
// RescuePasswords. Caller holds mu.
func (s *Sim) newRescuePassword() string {
	pw := strings.ReplaceAll(newUUID(), "-", "")[:16]
	s.rescuePasswords = append(s.rescuePasswords, pw)
	return pw
}

// RescuePasswords returns every rescue password the simulator handed out,
// for tests that check none of them shows where it must not.
func (s *Sim) RescuePasswords() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.rescuePasswords...)
}

// rescueUser is the rescue user of a new server (Options.RescueUser).
// Caller holds mu (the seeded generator).
func (s *Sim) rescueUser() string {
	if s.opts.RescueUser != RescueUserPerServer {
		return "rescue"
	}
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte("em-")
	for range 5 {
		b = append(b, chars[s.rng.IntN(len(chars))])
	}
	return string(b)
}

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return formatUUID(b[:])
}

func apiTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (s *Sim) now() time.Time { return time.Now().UTC() }

// machineFor derives the addressing of a new server: a loopback IPv4 never
// handed out before, MACs with Scaleway's b4:83:51 prefix derived from the
// ID, and an IPv6 made from the uplink MAC (EUI-64) as in the recordings.
func (s *Sim) machineFor(id, zone, name, project string, o *offer) Machine {
	n := s.ipSeq
	s.ipSeq++
	ipv4 := fmt.Sprintf("127.%d.%d.%d", 10+n/(256*254), (n/254)%256, n%254+1)
	sum := sha256.Sum256([]byte(id))
	macs := make([]string, s.opts.NICs)
	for i := range macs {
		h := sha256.Sum256(append(sum[:], byte(i)))
		macs[i] = net.HardwareAddr{0xb4, 0x83, 0x51, h[0], h[1], h[2]}.String()
	}
	mac, _ := net.ParseMAC(macs[0])
	zoneHash := sha256.Sum256([]byte(zone))
	ip6 := net.IP{0x20, 0x01, 0x0b, 0xc8, 0x12, 0x01, zoneHash[0], zoneHash[1],
		mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return Machine{ID: id, Zone: zone, Name: name, ProjectID: project, Offer: o.sdk, IPv4: ipv4,
		IPv6: ip6.String(), IPv6Gateway: "fe80::1", MACs: macs}
}

// render is the server's JSON as the API shows it.
func (s *Sim) render(sv *server) map[string]any {
	domain := ""
	ips := []map[string]string{}
	if sv.ipsListed {
		// As recorded: IPs listed early (or just delivered) have no reverse
		// and the server no domain until the delivery settles.
		reverse, status := "", "unknown"
		if sv.settled {
			domain = sv.id + "." + sv.zone + ".baremetal.scw.cloud"
			reverse, status = domain, "active"
		}
		for i, a := range []struct{ addr, version string }{{sv.machine.IPv4, "IPv4"}, {sv.machine.IPv6, "IPv6"}} {
			ips = append(ips, map[string]string{"address": a.addr, "id": sv.ipIDs[i], "reverse": reverse,
				"reverse_status": status, "reverse_status_message": "", "version": a.version})
		}
	}
	var install any
	if sv.install != nil {
		in := *sv.install
		if in.PartitioningSchema == nil {
			in.PartitioningSchema = json.RawMessage("null")
		}
		install = in
	}
	opts := []map[string]json.RawMessage{}
	for _, o := range sv.options {
		m := make(map[string]json.RawMessage, len(o.raw)+2)
		for k, v := range o.raw {
			m[k] = v
		}
		m["status"] = mustRaw(o.status)
		m["expires_at"] = json.RawMessage("null")
		opts = append(opts, m)
	}
	var rescue any
	if sv.bootType == string(BootRescue) {
		rescue = map[string]string{"user": sv.rescueUser, "password": sv.rescuePassword}
	}
	var userData any
	if sv.userData != nil {
		userData = sv.userData
	}
	return map[string]any{
		"boot_type": sv.bootType, "created_at": apiTime(sv.createdAt), "description": sv.description,
		"domain": domain, "id": sv.id, "install": install, "ips": ips, "name": sv.name,
		"offer_id": sv.offer.ID, "offer_name": sv.offer.Name, "options": opts,
		"organization_id": sv.orgID, "ping_status": sv.ping, "project_id": sv.projectID,
		"protected": sv.protected, "rescue_server": rescue, "status": sv.status,
		"tags": append([]string{}, sv.tags...), "updated_at": apiTime(sv.updatedAt), "user_data": userData,
		"zone": sv.zone,
	}
}

// lookup finds a server of the zone: the recorded untyped 404 once deleted,
// a typed not_found for an ID never seen. Caller holds mu.
func (s *Sim) lookup(rec *statusRecorder, r *http.Request) (*server, *apiError) {
	id := r.PathValue("id")
	rec.serverID = id
	sv := s.servers[id]
	if sv == nil || sv.zone != r.PathValue("zone") {
		if s.gone[id] {
			return nil, errGone()
		}
		return nil, errNotFound(serverResource, id)
	}
	return sv, nil
}

func decodeBody(r *http.Request, v any) *apiError {
	if r.Body == nil {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errMessage(http.StatusBadRequest, "invalid JSON body: "+err.Error())
	}
	return nil
}

func (s *Sim) projectAllowed(project string) bool {
	return len(s.opts.AllowedProjects) == 0 || slices.Contains(s.opts.AllowedProjects, project)
}

func (s *Sim) stockString(zone, name string) string {
	n := s.stock[zone+"/"+name]
	switch {
	case n <= 0:
		return "empty"
	case n <= s.opts.LowStockThreshold:
		return "low"
	default:
		return "available"
	}
}

// pageParams reads page and page_size as the API validates them.
func (s *Sim) pageParams(r *http.Request) (page, size int, e *apiError) {
	q := r.URL.Query()
	page, size = 1, s.opts.DefaultPageSize
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, errInvalid("page", "constraint", "must be greater or equal to 1")
		}
		page = n
	}
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > s.opts.MaxPageSize {
			return 0, 0, errInvalid("page_size", "constraint", fmt.Sprintf("must be between 1 and %d", s.opts.MaxPageSize))
		}
		size = n
	}
	return page, size, nil
}

func paginate[T any](items []T, page, size int) []T {
	start := (page - 1) * size
	if start >= len(items) {
		return []T{}
	}
	return items[start:min(start+size, len(items))]
}

// ---- catalogue ----------------------------------------------------------

func (s *Sim) listOffers(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	period := q.Get("subscription_period")
	switch period {
	case "", "unknown_subscription_period":
		period = "hourly" // as recorded: unknown lists the hourly offers
	case "hourly", "monthly":
	default:
		return nil, errInvalid("subscription_period", "constraint", "must be hourly or monthly")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	zc := s.zones[r.PathValue("zone")]
	var out []map[string]json.RawMessage
	for _, o := range zc.offers {
		if o.Period != period || (q.Has("name") && q.Get("name") != o.Name) {
			continue
		}
		out = append(out, o.json(s.stockString(zc.zone, o.Name)))
	}
	return map[string]any{"offers": orEmpty(paginate(out, page, size)), "total_count": len(out)}, nil
}

func orEmpty[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (s *Sim) getOffer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	zone := r.PathValue("zone")
	o := s.anyZoneOffer(zone, r.PathValue("id"))
	if o == nil {
		return nil, errNotFound("offer", r.PathValue("id"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return o.json(s.stockString(zone, o.Name)), nil
}

func (s *Sim) listOptions(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	zc := s.zones[r.PathValue("zone")]
	o, e := s.offerFilter(zc, q)
	if e != nil {
		return nil, e
	}
	var out []map[string]json.RawMessage
	for _, opt := range zc.options {
		id := rawString(opt["id"])
		if o != nil && !o.optionIDs[id] {
			continue
		}
		if q.Has("name") && !strings.Contains(rawString(opt["name"]), q.Get("name")) {
			continue
		}
		out = append(out, opt)
	}
	return map[string]any{"options": orEmpty(paginate(out, page, size)), "total_count": len(out)}, nil
}

// offerFilter is the offer a catalogue listing's optional offer_id names:
// nil without one, not_found for an unknown one.
func (s *Sim) offerFilter(zc *zoneCatalog, q url.Values) (*offer, *apiError) {
	if !q.Has("offer_id") {
		return nil, nil
	}
	o := s.anyZoneOffer(zc.zone, q.Get("offer_id"))
	if o == nil {
		return nil, errNotFound("offer", q.Get("offer_id"))
	}
	return o, nil
}

func (s *Sim) getOption(rec *statusRecorder, r *http.Request) (any, *apiError) {
	opt := s.zones[r.PathValue("zone")].optionByID[r.PathValue("id")]
	if opt == nil {
		return nil, errNotFound("option", r.PathValue("id"))
	}
	return opt, nil
}

func (s *Sim) listOS(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	zc := s.zones[r.PathValue("zone")]
	o, e := s.offerFilter(zc, q)
	if e != nil {
		return nil, e
	}
	var out []map[string]json.RawMessage
	for _, os := range zc.os {
		if o != nil && o.incompatOS[rawString(os["id"])] {
			continue
		}
		out = append(out, os)
	}
	return map[string]any{"os": orEmpty(paginate(out, page, size)), "total_count": len(out)}, nil
}

func (s *Sim) getOS(rec *statusRecorder, r *http.Request) (any, *apiError) {
	os := s.zones[r.PathValue("zone")].osByID[r.PathValue("id")]
	if os == nil {
		return nil, errNotFound("os", r.PathValue("id"))
	}
	return os, nil
}

// ---- servers ------------------------------------------------------------

type createRequest struct {
	OfferID        string          `json:"offer_id"`
	OrganizationID *string         `json:"organization_id"`
	ProjectID      *string         `json:"project_id"`
	Name           string          `json:"name"`
	Description    string          `json:"description"`
	Tags           []string        `json:"tags"`
	Install        *installRequest `json:"install"`
	OptionIDs      []string        `json:"option_ids"`
	Protected      bool            `json:"protected"`
	UserData       json.RawMessage `json:"user_data"`
}

type installRequest struct {
	OsID               string          `json:"os_id"`
	Hostname           string          `json:"hostname"`
	SSHKeyIDs          []string        `json:"ssh_key_ids"`
	User               *string         `json:"user"`
	ServiceUser        *string         `json:"service_user"`
	PartitioningSchema json.RawMessage `json:"partitioning_schema"`
}

func (s *Sim) createServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req createRequest
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	rec.tags = append([]string(nil), req.Tags...)
	zone := r.PathValue("zone")
	if e := req.check(); e != nil {
		return nil, e
	}
	project, e := s.createProject(req)
	if e != nil {
		return nil, e
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	zc := s.zones[zone]
	o, e := zc.orderableOffer(req)
	if e != nil {
		return nil, e
	}
	install, e := s.installFor(zc, o, req.Install)
	if e != nil {
		return nil, e
	}
	if e := s.checkCapacity(project, zone, o); e != nil {
		return nil, e
	}

	sv := s.newServer(zone, project, o, req, install)
	rec.serverID = sv.id
	s.servers[sv.id] = sv
	s.startOrder(sv)
	s.record(sv, LedgerOrder, nil, "", "")
	s.logf("server %s (%s, %s) created: %s", sv.id, o.Name, zone, sv.status)
	body := s.render(sv)
	if sv.status == stOrdered && s.opts.ReadyIPs == ReadyIPsRecorded {
		sv.ipsListed = true // recorded: reads after the order list the IPs while still "ordered"
	}
	return body, nil
}

// check refuses a create request the API rejects before it looks at
// anything it holds: a missing or malformed offer, no name, an empty tag.
func (req createRequest) check() *apiError {
	switch {
	case req.OfferID == "":
		return errInvalid("offer_id", "required", "")
	case !uuidRE.MatchString(req.OfferID):
		return errInvalid("offer_id", "format", "must be a UUID")
	case req.Name == "":
		return errInvalid("name", "required", "")
	}
	if slices.Contains(req.Tags, "") {
		return errInvalid("tags", "constraint", "tags must not be empty strings")
	}
	return nil
}

// createProject picks the project a new server goes in: the request's
// project, else its organization's default project (which has the
// organization's ID), else the simulator's; the key must be allowed to write
// there.
func (s *Sim) createProject(req createRequest) (string, *apiError) {
	project := s.opts.ProjectID
	switch {
	case req.ProjectID != nil:
		project = *req.ProjectID
	case req.OrganizationID != nil:
		project = *req.OrganizationID
	}
	if !uuidRE.MatchString(project) {
		return "", errInvalid("project_id", "format", "must be a UUID")
	}
	if !s.projectAllowed(project) {
		return "", errPermission(serverResource, "write")
	}
	return project, nil
}

// orderableOffer finds the requested offer in the zone and checks that it
// can take the request: enabled, cloud-init when user data is given, and
// each option known and sold with it.
func (zc *zoneCatalog) orderableOffer(req createRequest) (*offer, *apiError) {
	o := zc.offerByID[req.OfferID]
	if o == nil {
		return nil, errNotFound("offer", req.OfferID)
	}
	if !o.Enabled {
		return nil, errInvalid("offer_id", "constraint", "offer is not available")
	}
	if len(req.UserData) > 0 && string(req.UserData) != "null" && !slices.Contains(o.sdk.Tags, "cloud-init") {
		// Recorded: this refusal of the request itself comes back as a 503
		// with only a message (a client retrying every 5xx loops on it).
		return nil, errMessage(http.StatusServiceUnavailable, "cloud-init is not supported on this offer")
	}
	for _, id := range req.OptionIDs {
		if zc.optionByID[id] == nil {
			return nil, errNotFound("option", id)
		}
		if !o.optionIDs[id] {
			return nil, errInvalid("option_ids", "constraint", "option "+id+" is not available for this offer")
		}
	}
	return o, nil
}

// installFor checks an install given with the order (an OS the zone has and
// the offer takes, known SSH keys) and makes its state; nil when none was
// given. Caller holds mu.
func (s *Sim) installFor(zc *zoneCatalog, o *offer, in *installRequest) (*serverInstall, *apiError) {
	if in == nil {
		return nil, nil
	}
	if zc.osByID[in.OsID] == nil {
		return nil, errNotFound("os", in.OsID)
	}
	if o.incompatOS[in.OsID] {
		return nil, errInvalid("install.os_id", "constraint", "os is not compatible with this offer")
	}
	for _, k := range in.SSHKeyIDs {
		if s.keys[k] == nil {
			return nil, errNotFound("ssh_key", k)
		}
	}
	install := &serverInstall{OsID: in.OsID, Hostname: in.Hostname, SSHKeyIDs: orEmpty(in.SSHKeyIDs),
		Status: "to_install", User: "root", PartitioningSchema: in.PartitioningSchema}
	if in.User != nil {
		install.User = *in.User
	}
	if in.ServiceUser != nil {
		install.ServiceUser = *in.ServiceUser
	}
	return install, nil
}

// checkCapacity refuses an order over the project's quota for the offer, or
// for an offer out of stock when the simulator answers stockouts with an
// error. Caller holds mu.
func (s *Sim) checkCapacity(project, zone string, o *offer) *apiError {
	if q, ok := s.quotaFor(project, o.Name); ok {
		if used := s.countServers(project, o.Name); used >= q {
			return errQuota(o.QuotaName, used, q)
		}
	}
	if s.stock[zone+"/"+o.Name] <= 0 && s.opts.Stockout == StockoutError {
		return errOutOfStock(o.Name)
	}
	return nil
}

// newServer builds the state of a server just ordered. Caller holds mu.
func (s *Sim) newServer(zone, project string, o *offer, req createRequest, install *serverInstall) *server {
	now := s.now()
	s.order++
	id := newUUID()
	sv := &server{id: id, zone: zone, name: req.Name, description: req.Description, projectID: project,
		orgID: s.opts.OrganizationID, tags: orEmpty(append([]string(nil), req.Tags...)), offer: o, bootType: string(BootNormal),
		ping: "ping_status_unknown", createdAt: now, updatedAt: now, order: s.order, install: install,
		protected: req.Protected, userData: req.UserData, ipIDs: [2]string{newUUID(), newUUID()},
		rescueUser: s.rescueUser(), rescuePassword: s.newRescuePassword()}
	if string(sv.userData) == "null" {
		sv.userData = nil
	}
	sv.machine = s.machineFor(id, zone, req.Name, project, o)
	for _, optID := range req.OptionIDs {
		sv.options = append(sv.options, &serverOption{id: optID, raw: serverOptionRaw(o, optID),
			status: "option_status_enabling"})
	}
	sv.host = newHostQueue(&s.hostWG)
	return sv
}

// startOrder moves a new server to its first status: out of stock when
// there is none (a stockout answered with a server), ordered for a while
// when it comes with an install or the options ask for an order delay,
// else straight to delivery. Caller holds mu.
func (s *Sim) startOrder(sv *server) {
	switch {
	case s.stock[sv.zone+"/"+sv.offer.Name] <= 0: // StockoutServer
		s.setStatus(sv, stOutOfStock)
	case sv.install != nil || s.opts.Delays.Order > 0:
		s.takeStock(sv)
		s.setStatus(sv, stOrdered)
		s.schedule(sv, s.opts.Delays.Order, func() { s.startDelivery(sv) })
	default:
		s.takeStock(sv)
		s.startDelivery(sv)
	}
}

func (s *Sim) quotaFor(project, offerName string) (int, bool) {
	if q, ok := s.quotas[project+"/"+offerName]; ok {
		return q, true
	}
	q, ok := s.quotas[offerName]
	return q, ok
}

func (s *Sim) countServers(project, offerName string) int {
	n := 0
	for _, sv := range s.servers {
		if sv.projectID == project && sv.offer.Name == offerName {
			n++
		}
	}
	return n
}

func (s *Sim) takeStock(sv *server) {
	s.stock[sv.zone+"/"+sv.offer.Name]--
	sv.holdsStock = true
}

// serverOptionRaw builds a server option entry from the offer's option.
func serverOptionRaw(o *offer, optID string) map[string]json.RawMessage {
	var opts []map[string]json.RawMessage
	_ = json.Unmarshal(o.raw["options"], &opts)
	out := map[string]json.RawMessage{}
	for _, opt := range opts {
		if rawString(opt["id"]) != optID {
			continue
		}
		for _, k := range []string{"id", "name", "manageable", "license", "public_bandwidth", "private_network",
			"remote_access", "certification"} {
			if v, ok := opt[k]; ok {
				out[k] = v
			}
		}
	}
	return out
}

// schedule runs fn after d unless the server has been acted on meanwhile;
// stuck and error faults are applied at that edge. Caller holds mu.
func (s *Sim) schedule(sv *server, d time.Duration, fn func()) {
	gen, from := sv.gen, sv.status
	s.after(d, func() {
		if sv.gen != gen || s.servers[sv.id] != sv {
			return
		}
		s.advance(sv, from, fn)
	})
}

func (s *Sim) advance(sv *server, from string, fn func()) {
	if s.serverFault(sv, FaultStuck, from) {
		s.logf("server %s stuck in %s", sv.id, from)
		sv.stuck = func() { s.advance(sv, from, fn) }
		return
	}
	if s.serverFault(sv, FaultServerError, from) {
		s.toError(sv)
		return
	}
	fn()
}

// resumeStuck lets servers whose stuck fault is gone carry on. Caller holds mu.
func (s *Sim) resumeStuck() {
	var held []*server
	for _, sv := range s.servers {
		if sv.stuck != nil {
			held = append(held, sv)
		}
	}
	sort.Slice(held, func(i, j int) bool { return held[i].order < held[j].order })
	for _, sv := range held {
		fn := sv.stuck
		sv.stuck = nil
		fn()
	}
}

func (s *Sim) setStatus(sv *server, status string) {
	s.logf("server %s: %q -> %s", sv.id, sv.status, status)
	sv.status = status
	sv.updatedAt = s.now()
	s.history[sv.id] = append(s.history[sv.id], status)
	s.changes[sv.id] = append(s.changes[sv.id], Transition{Status: status, BootType: sv.bootType, At: sv.updatedAt})
}

// Transition is a change of a server the client can observe: a status, or
// "ips-listed" when a server ready without IPs gets them in the API.
type Transition struct {
	Status   string
	BootType string // the server's boot type then
	At       time.Time
}

// Transitions returns a server's observable changes, oldest first, also
// after it is gone (a "gone" transition is last then).
func (s *Sim) Transitions(id string) []Transition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Transition(nil), s.changes[id]...)
}

// History returns every status a server went through, in order, also after
// it is gone ("gone" is appended then).
func (s *Sim) History(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.history[id]...)
}

// act marks a user action: pending transitions of the server are dropped.
func (s *Sim) act(sv *server) {
	sv.gen++
	sv.stuck = nil
}

func (s *Sim) toError(sv *server) {
	s.act(sv)
	s.setStatus(sv, stError)
	sv.ping = "ping_status_down"
	s.powerOff(sv)
}

func (s *Sim) startDelivery(sv *server) {
	s.setStatus(sv, stDelivering)
	s.schedule(sv, s.opts.Delays.Delivery, func() { s.deliver(sv) })
}

func (s *Sim) deliver(sv *server) {
	s.listIPsAtReady(sv)
	s.after(s.opts.Delays.Settle, func() {
		sv.settled = true
		if sv.ping == "ping_status_unknown" {
			sv.ping = "ping_status_up"
		}
	})
	for _, o := range sv.options {
		o.status = "option_status_enable"
	}
	s.setStatus(sv, stReady)
	if sv.install == nil {
		s.boot(sv, BootNormal, nil)
		return
	}
	sv.install.Status = "installing"
	s.schedule(sv, s.opts.Delays.Install, func() {
		sv.install.Status = "completed"
		sv.updatedAt = s.now()
		s.boot(sv, BootNormal, nil)
	})
}

// listIPsAtReady decides, as the server turns ready, whether the API lists
// its IPs now, later or never (Options.ReadyIPs). Caller holds mu.
func (s *Sim) listIPsAtReady(sv *server) {
	mode := s.opts.ReadyIPs
	switch {
	case mode == ReadyIPsNever:
		sv.ipsListed = false
	case mode == ReadyIPsLate, mode == ReadyIPsRecorded && !sv.ipsListed && s.rng.Float64() < ReadyWithoutIPsRate:
		sv.ipsListed = false
		s.logf("server %s: ready without IPs for %s", sv.id, s.opts.scaled(s.opts.Delays.IPsAfterReady))
		s.after(s.opts.Delays.IPsAfterReady, func() {
			sv.ipsListed = true
			s.changes[sv.id] = append(s.changes[sv.id], Transition{Status: "ips-listed", At: s.now()})
		})
	default:
		sv.ipsListed = true
	}
}

// boot queues Host.Boot; a failing boot puts the server in error.
func (s *Sim) boot(sv *server, mode BootMode, keys []string) {
	sv.powered = true
	m := sv.machine
	m.Tags = append([]string(nil), sv.tags...)
	if mode == BootRescue {
		m.RescueUser, m.RescuePassword = sv.rescueUser, sv.rescuePassword
		m.Kexec = s.opts.KexecFor(sv.offer.Name)
		m.KexecBoot = s.delay(s.opts.Delays.KexecBoot)
	}
	gen := sv.gen
	host, ctx := s.opts.Host, s.ctx
	s.logf("server %s: host boot %s", sv.id, mode)
	sv.host.push(func() {
		if err := host.Boot(ctx, m, mode, keys); err != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.logf("server %s: host boot %s failed: %v", sv.id, mode, err)
			if sv.gen == gen && s.servers[sv.id] == sv && !s.closed {
				s.toError(sv)
			}
		}
	})
}

func (s *Sim) powerOff(sv *server) {
	if !sv.powered {
		return
	}
	sv.powered = false
	host, id := s.opts.Host, sv.id
	s.logf("server %s: host power off", id)
	sv.host.push(func() { host.PowerOff(id) })
}

func (s *Sim) getServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staleOn() && s.opts.StaleReadsByID {
		rec.serverID = r.PathValue("id")
		if body, gone, ok := s.staleGet(rec.serverID, r.PathValue("zone")); ok {
			if gone {
				return nil, errGone()
			}
			return body, nil
		}
	}
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	return s.render(sv), nil
}

func (s *Sim) listServers(rec *statusRecorder, r *http.Request) (any, *apiError) {
	page, size, e := s.pageParams(r)
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	desc := false
	switch q.Get("order_by") {
	case "", "created_at_asc":
	case "created_at_desc":
		desc = true
	default:
		return nil, errInvalid("order_by", "constraint", "must be created_at_asc or created_at_desc")
	}
	zone := r.PathValue("zone")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staleOn() {
		all := s.staleList(zone, q, desc)
		return map[string]any{"servers": orEmpty(paginate(all, page, size)), "total_count": len(all)}, nil
	}
	var match []*server
	listed := s.now().Add(-s.opts.scaled(s.opts.ListLag))
	for _, sv := range s.servers {
		if sv.zone != zone || !serverMatches(sv, q) || sv.createdAt.After(listed) {
			continue
		}
		match = append(match, sv)
	}
	sort.Slice(match, func(i, j int) bool {
		if desc {
			return match[i].order > match[j].order
		}
		return match[i].order < match[j].order
	})
	out := []map[string]any{}
	for _, sv := range paginate(match, page, size) {
		out = append(out, s.render(sv))
	}
	return map[string]any{"servers": out, "total_count": len(match)}, nil
}

func serverMatches(sv *server, q map[string][]string) bool { return matches(matchOf(sv), q) }

// matches reports whether a server (as it is, or as it was for a stale
// listing) passes ListServers' filters.
func matches(m matchable, q map[string][]string) bool {
	for _, t := range q["tags"] {
		if !slices.Contains(m.tags, t) {
			return false
		}
	}
	if st := q["status"]; len(st) > 0 && !slices.Contains(st, m.status) {
		return false
	}
	if n := q["name"]; len(n) > 0 && !strings.Contains(m.name, n[0]) {
		return false
	}
	return firstIs(q["project_id"], m.project) && firstIs(q["organization_id"], m.org) &&
		(len(q["option_id"]) == 0 || slices.Contains(m.options, q["option_id"][0]))
}

// firstIs reports whether a query parameter, when given, has v as its first
// value; the API reads only the first of a repeated single-valued filter.
func firstIs(vs []string, v string) bool {
	return len(vs) == 0 || vs[0] == v
}

type updateRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Tags        *[]string       `json:"tags"`
	Protected   *bool           `json:"protected"`
	UserData    json.RawMessage `json:"user_data"`
}

func (s *Sim) updateServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req updateRequest
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	if e := req.check(); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	s.applyUpdate(sv, req)
	sv.updatedAt = s.now()
	return s.render(sv), nil
}

// check refuses an update that would empty the name or add an empty tag.
func (req updateRequest) check() *apiError {
	if req.Name != nil && *req.Name == "" {
		return errInvalid("name", "constraint", "must not be empty")
	}
	if req.Tags != nil && slices.Contains(*req.Tags, "") {
		return errInvalid("tags", "constraint", "tags must not be empty strings")
	}
	return nil
}

// applyUpdate sets the fields an update gives and leaves the others; a tag
// change goes in the ledger. Caller holds mu.
func (s *Sim) applyUpdate(sv *server, req updateRequest) {
	if req.Name != nil {
		sv.name = *req.Name
		sv.machine.Name = *req.Name
	}
	if req.Description != nil {
		sv.description = *req.Description
	}
	if req.Tags != nil {
		before := sv.tags
		sv.tags = append([]string{}, *req.Tags...)
		s.record(sv, LedgerTags, before, "", sv.status)
	}
	if req.Protected != nil {
		sv.protected = *req.Protected
	}
	if req.UserData != nil {
		sv.userData = req.UserData
		if string(req.UserData) == "null" {
			sv.userData = nil
		}
	}
}

// actionable checks a server can take reboot/stop/start/option changes.
func actionable(sv *server) *apiError {
	switch sv.status {
	case stOrdered, stDelivering, stOutOfStock:
		return errNotDelivered()
	case stStopping, stStarting, stDeleting, "resetting", "migrating":
		return errTransient(serverResource, sv.id, sv.status)
	case stLocked:
		return &apiError{status: http.StatusForbidden, body: map[string]string{"message": "resource is locked",
			"resource": serverResource, "resource_id": sv.id, "type": "locked"}}
	}
	return nil
}

type bootRequest struct {
	BootType  string   `json:"boot_type"`
	SSHKeyIDs []string `json:"ssh_key_ids"`
}

// bootParams validates boot_type and resolves ssh_key_ids to key lines.
func (s *Sim) bootParams(req bootRequest) (BootMode, []string, *apiError) {
	mode := BootNormal
	switch req.BootType {
	case "", "unknown_boot_type", "normal":
	case "rescue":
		mode = BootRescue
	default:
		return "", nil, errInvalid("boot_type", "constraint", "must be normal or rescue")
	}
	var lines []string
	for _, id := range req.SSHKeyIDs {
		k := s.keys[id]
		if k == nil {
			return "", nil, errNotFound("ssh_key", id)
		}
		if mode == BootRescue && !k.disabled {
			lines = append(lines, k.publicKey)
		}
	}
	return mode, lines, nil
}

func (s *Sim) rebootServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	return s.bootAction(rec, r, stStopped, "Server is stopped", func(sv *server, mode BootMode, keys []string) {
		s.powerOff(sv)
		if s.opts.Unrecorded == UnrecordedTyped {
			s.setStatus(sv, stStopping)
		} // else the reboot shows late: still "ready" (variants.go)
		s.schedule(sv, s.opts.Delays.RebootStop, func() {
			s.setStatus(sv, stStarting)
			s.schedule(sv, s.opts.Delays.RebootStart, func() { s.ready(sv, mode, keys) })
		})
	})
}

// bootAction is what start and reboot share: decode the boot request, find
// an actionable server not in status refuse (400 with msg), resolve the boot
// mode and keys, mark the action, then let begin move the server on (under mu).
func (s *Sim) bootAction(rec *statusRecorder, r *http.Request, refuse, msg string,
	begin func(sv *server, mode BootMode, keys []string)) (any, *apiError) {
	var req bootRequest
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	if e := actionable(sv); e != nil {
		return nil, e
	}
	if sv.status == refuse {
		return nil, errMessage(http.StatusBadRequest, msg)
	}
	mode, keys, e := s.bootParams(req)
	if e != nil {
		return nil, e
	}
	s.record(sv, LedgerReboot, sv.tags, string(mode), sv.status)
	s.act(sv)
	sv.bootType = string(mode)
	if mode == BootRescue {
		// Each rescue boot has its own password, shown from the answer on.
		sv.rescuePassword = s.newRescuePassword()
	}
	begin(sv, mode, keys)
	return s.render(sv), nil
}

func (s *Sim) ready(sv *server, mode BootMode, keys []string) {
	sv.ping = "ping_status_up"
	s.setStatus(sv, stReady)
	s.boot(sv, mode, keys)
}

// FirmwareReboot reboots server id as its firmware would without an API
// call (a power cut, a reboot from the console, a kernel panic with
// reboot): the machine stops, and boots what the API's boot type says,
// rescue after a kexec jump (the API still says rescue) and normal
// otherwise; nothing is in the ledger, and the status goes through
// stopping and starting as for a reboot. A rescue boot this way names no
// SSH key: nothing logs into it.
func (s *Sim) FirmwareReboot(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.servers[id]
	if sv == nil {
		return fmt.Errorf("scwsim: no server %s", id)
	}
	if sv.status != stReady {
		return fmt.Errorf("scwsim: server %s is %s, not ready", id, sv.status)
	}
	mode := BootMode(sv.bootType)
	if mode != BootRescue {
		mode = BootNormal
	}
	s.logf("server %s: firmware reboot into %s", id, mode)
	s.act(sv)
	s.powerOff(sv)
	s.setStatus(sv, stStopping)
	s.schedule(sv, s.opts.Delays.RebootStop, func() {
		s.setStatus(sv, stStarting)
		s.schedule(sv, s.opts.Delays.RebootStart, func() { s.ready(sv, mode, nil) })
	})
	return nil
}

func (s *Sim) stopServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	if e := actionable(sv); e != nil {
		return nil, e
	}
	if sv.status == stStopped {
		return nil, errMessage(http.StatusBadRequest, "Server is already stopped")
	}
	s.record(sv, LedgerStop, sv.tags, "", sv.status)
	s.act(sv)
	s.powerOff(sv)
	s.setStatus(sv, stStopping)
	// As recorded, ping_status stays as it was ("ping_status_up") once stopped.
	s.schedule(sv, s.opts.Delays.Stop, func() { s.setStatus(sv, stStopped) })
	return s.render(sv), nil
}

func (s *Sim) startServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	return s.bootAction(rec, r, stReady, "Server is already started", func(sv *server, mode BootMode, keys []string) {
		s.powerOff(sv) // from error: the machine may still run
		s.setStatus(sv, stStarting)
		s.schedule(sv, s.opts.Delays.Start, func() { s.ready(sv, mode, keys) })
	})
}

func (s *Sim) deleteServer(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	if sv.status == stDeleting {
		return nil, errTransient(serverResource, sv.id, sv.status)
	}
	if sv.protected {
		return nil, errMessage(http.StatusBadRequest, "Server is protected")
	}
	s.record(sv, LedgerDelete, sv.tags, "", sv.status)
	s.act(sv)
	s.powerOff(sv)
	s.setStatus(sv, stDeleting)
	body := s.render(sv)
	// As recorded: the answer still shows the options as they were; then
	// they read "disabling" and attachments "detaching" while the server is
	// deleting, and both go with it.
	for _, o := range sv.options {
		o.status = "option_status_disabling"
	}
	for _, a := range s.pns {
		if a.serverID == sv.id && a.status != "detaching" {
			a.status, a.updatedAt = "detaching", s.now()
		}
	}
	s.schedule(sv, s.opts.Delays.Delete, func() { s.remove(sv) })
	return body, nil
}

// remove makes a deleted server gone: 404, stock back, Host.Delete.
func (s *Sim) remove(sv *server) {
	s.record(sv, LedgerGone, sv.tags, "", sv.status)
	s.snapGone(sv)
	delete(s.servers, sv.id)
	for _, a := range s.pns {
		if a.serverID == sv.id {
			delete(s.pns, a.id)
		}
	}
	s.gone[sv.id] = true
	s.history[sv.id] = append(s.history[sv.id], "gone")
	s.changes[sv.id] = append(s.changes[sv.id], Transition{Status: "gone", At: s.now()})
	if sv.holdsStock {
		s.stock[sv.zone+"/"+sv.offer.Name]++
		s.releaseStockout(sv.zone, sv.offer.Name)
	}
	s.logf("server %s gone", sv.id)
	host, id := s.opts.Host, sv.id
	sv.host.push(func() { host.Delete(id) })
	sv.host.close()
}

// releaseStockout delivers servers waiting in out_of_stock, oldest first,
// while stock lasts. Caller holds mu.
func (s *Sim) releaseStockout(zone, offerName string) {
	var waiting []*server
	for _, sv := range s.servers {
		if sv.zone == zone && sv.offer.Name == offerName && sv.status == stOutOfStock {
			waiting = append(waiting, sv)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].order < waiting[j].order })
	for _, sv := range waiting {
		if s.stock[zone+"/"+offerName] <= 0 {
			return
		}
		s.takeStock(sv)
		s.startDelivery(sv)
	}
}

func (s *Sim) addOption(rec *statusRecorder, r *http.Request) (any, *apiError) {
	var req struct {
		ExpiresAt *time.Time `json:"expires_at"`
	}
	if e := decodeBody(r, &req); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	optID := r.PathValue("option")
	if s.zones[sv.zone].optionByID[optID] == nil {
		return nil, errNotFound("option", optID)
	}
	if !sv.offer.optionIDs[optID] {
		return nil, errInvalid("option_id", "constraint", "option is not available for this offer")
	}
	if e := actionable(sv); e != nil {
		return nil, e
	}
	if slices.ContainsFunc(sv.options, func(o *serverOption) bool { return o.id == optID }) {
		return nil, errConflict("option already enabled on this server")
	}
	so := &serverOption{id: optID, raw: serverOptionRaw(sv.offer, optID), status: "option_status_enabling"}
	sv.options = append(sv.options, so)
	sv.updatedAt = s.now()
	s.after(s.opts.Delays.OptionEnable, func() {
		if so.status == "option_status_enabling" {
			so.status = "option_status_enable"
		}
	})
	return s.render(sv), nil
}

func (s *Sim) deleteOption(rec *statusRecorder, r *http.Request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, e := s.lookup(rec, r)
	if e != nil {
		return nil, e
	}
	optID := r.PathValue("option")
	i := slices.IndexFunc(sv.options, func(o *serverOption) bool { return o.id == optID })
	if i < 0 {
		return nil, errNotFound("option", optID)
	}
	if e := actionable(sv); e != nil {
		return nil, e
	}
	so := sv.options[i]
	so.status = "option_status_disabling"
	sv.updatedAt = s.now()
	body := s.render(sv)
	s.after(s.opts.Delays.OptionEnable, func() {
		sv.options = slices.DeleteFunc(sv.options, func(o *serverOption) bool { return o == so })
	})
	return body, nil
}

// ---- control and inspection for tests -----------------------------------

// ServerState is a snapshot of one server as the simulator holds it.
type ServerState struct {
	ID, Zone, Name, ProjectID string
	OfferID, OfferName        string
	Status                    string
	BootType                  string
	Tags                      []string
	Machine                   Machine
	CreatedAt                 time.Time
}

func (s *Sim) snapshot(sv *server) ServerState {
	m := sv.machine
	m.Tags = append([]string(nil), sv.tags...)
	if sv.bootType == string(BootRescue) {
		m.RescueUser, m.RescuePassword = sv.rescueUser, sv.rescuePassword
	}
	return ServerState{ID: sv.id, Zone: sv.zone, Name: sv.name, ProjectID: sv.projectID, OfferID: sv.offer.ID,
		OfferName: sv.offer.Name, Status: sv.status, BootType: sv.bootType, Tags: m.Tags, Machine: m,
		CreatedAt: sv.createdAt}
}

// Servers returns every server not yet gone, oldest first.
func (s *Sim) Servers() []ServerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]*server, 0, len(s.servers))
	for _, sv := range s.servers {
		all = append(all, sv)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].order < all[j].order })
	out := make([]ServerState, 0, len(all))
	for _, sv := range all {
		out = append(out, s.snapshot(sv))
	}
	return out
}

// Server returns one server; ok is false once it is gone or if never created.
func (s *Sim) Server(id string) (ServerState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.servers[id]
	if sv == nil {
		return ServerState{}, false
	}
	return s.snapshot(sv), true
}

// Age makes server id d older (its created_at moves back by d), as if it had
// been ordered that much earlier: a test reaches the end of a paid month
// without waiting for it. The server's state is otherwise unchanged.
func (s *Sim) Age(id string, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.servers[id]
	if sv == nil {
		return fmt.Errorf("scwsim: no server %s", id)
	}
	sv.createdAt = sv.createdAt.Add(-d)
	return nil
}

// ForceStatus sets a server's status now, dropping its pending phases
// (e.g. "error" for a machine that broke, "locked" for an abuse lock).
// "error" powers the machine off.
func (s *Sim) ForceStatus(id, status string) error {
	if !slices.Contains(serverStates, status) {
		return fmt.Errorf("scwsim: ForceStatus: %q is not a server status", status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.servers[id]
	if sv == nil {
		return fmt.Errorf("scwsim: ForceStatus: no server %s", id)
	}
	if status == stError {
		s.toError(sv)
		return nil
	}
	s.act(sv)
	s.setStatus(sv, status)
	return nil
}

// Stock returns the machines left for an offer in a zone.
func (s *Sim) Stock(zone, offerName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stock[zone+"/"+offerName]
}

// SetStock sets the machines left for an offer in a zone ("" = every
// zone); servers waiting in out_of_stock get delivered if it rises.
func (s *Sim) SetStock(zone, offerName string, n int) error {
	if n < 0 {
		return fmt.Errorf("scwsim: SetStock: count %d is negative", n)
	}
	if !knownOfferName(offerName) {
		return fmt.Errorf("scwsim: SetStock: no offer named %q", offerName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if zone != "" && s.zones[zone] == nil {
		return fmt.Errorf("scwsim: SetStock: zone %q is not simulated", zone)
	}
	for z := range s.zones {
		if zone == "" || z == zone {
			s.stock[z+"/"+offerName] = n
			s.releaseStockout(z, offerName)
		}
	}
	return nil
}

// SetQuota limits the servers of an offer in a project ("" = every
// project); max < 0 removes the limit.
func (s *Sim) SetQuota(projectID, offerName string, max int) error {
	if projectID != "" && !uuidRE.MatchString(projectID) {
		return fmt.Errorf("scwsim: SetQuota: project %q is not a UUID", projectID)
	}
	if !knownOfferName(offerName) {
		return fmt.Errorf("scwsim: SetQuota: no offer named %q", offerName)
	}
	key := offerName
	if projectID != "" {
		key = projectID + "/" + offerName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if max < 0 {
		delete(s.quotas, key)
	} else {
		s.quotas[key] = max
	}
	return nil
}

// OfferID returns the ID of an offer by name and subscription period
// ("hourly" or "monthly") in a zone.
func (s *Sim) OfferID(zone, name, period string) (string, bool) {
	zc := s.zones[zone]
	if zc == nil {
		return "", false
	}
	for _, o := range zc.offers {
		if o.Name == name && o.Period == period {
			return o.ID, true
		}
	}
	return "", false
}
