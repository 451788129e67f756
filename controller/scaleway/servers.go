package scaleway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Operation names: the `op` label of the metrics and the Op of *Error.
const (
	OpCreateServer      = "CreateServer"
	OpGetServer         = "GetServer"
	OpListServers       = "ListServers"
	OpPollServers       = "PollServers"
	OpUpdateServer      = "UpdateServer"
	OpDeleteServer      = "DeleteServer"
	OpRebootServer      = "RebootServer"
	OpStartServer       = "StartServer"
	OpStopServer        = "StopServer"
	OpAddServerOption   = "AddServerOption"
	OpListOptions       = "ListOptions"
	OpListOffers        = "ListOffers"
	OpAttachPN          = "AttachPrivateNetwork"
	OpListServerPNs     = "ListServerPrivateNetworks"
	OpListSSHKeys       = "ListSSHKeys"
	OpCreateSSHKey      = "CreateSSHKey"
	OpDeleteSSHKey      = "DeleteSSHKey"
	defaultListPageSize = uint32(100)
)

// GetServer reads one server. A deleted server gives an error for which
// IsNotFound is true.
func (c *Client) GetServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if id == "" {
		return nil, errors.New("scaleway GetServer: server id is required")
	}
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpGetServer, zone: zone, resource: id, idempotent: true}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.GetServer(&baremetal.GetServerRequest{Zone: zone, ServerID: id}, scw.WithContext(ctx))
		return err
	})
	if err != nil {
		c.seen.forget(zone, id)
	} else {
		c.seen.observeByID(srv, c.clock.Now())
	}
	return srv, err
}

// FreshServer reads one server by ID as the base of a write that depends
// on what it says (a tag edit, a release, a host-key pin): never a listing
// or a listing's state, which may trail the server's writes by minutes (a
// restarted process has nothing of its own to hold them against, and took
// a spare a moment ago given to another NodeClaim by the previous one).
// When this process wrote the server itself, the state its write returned
// stands in for a read that does not show it yet. The first call waits
// until Config.ReadLag has passed (see there): reads by ID may lag too.
func (c *Client) FreshServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if err := c.waitReadFloor(ctx); err != nil {
		return nil, err
	}
	srv, err := c.GetServer(ctx, zone, id)
	if err != nil {
		return nil, err
	}
	if own, ok := c.seen.ownWrite(zone, id); ok && !NewerThan(srv, own) {
		return own, nil
	}
	return srv, nil
}

// waitReadFloor waits, on the first call only, Config.ReadLag: from then
// on the API's reads show every write made before this process began
// writing. The floor counts from the first write's read, not from the
// client's start: under leader election a process writes only once it
// leads, and the previous leader wrote until then.
func (c *Client) waitReadFloor(ctx context.Context) error {
	if c.cfg.ReadLag <= 0 {
		return nil
	}
	c.readFloorOnce.Do(func() {
		c.readFloor = c.clock.Now().Add(c.cfg.ReadLag)
		c.log.Info("waiting for the API's reads to show the previous process's writes before the first write", "readLag", c.cfg.ReadLag.String())
	})
	d := c.readFloor.Sub(c.clock.Now())
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.clock.After(d):
		return nil
	}
}

// trustedSince is when reads became trustworthy as write bases (zero: always).
func (c *Client) trustedSince() time.Time {
	if c.cfg.ReadLag <= 0 {
		return time.Time{}
	}
	c.readFloorOnce.Do(func() { c.readFloor = c.clock.Now().Add(c.cfg.ReadLag) })
	return c.readFloor
}

// RecentServer is the server as this client last read or wrote it, when
// that was within the freshness the batched poll accepts (see seenServers),
// else GetServer. For callers that act on the state and would otherwise
// read it right after an order, a poll or a write returned it; a caller
// waiting for a change (a deletion to finish) reads with GetServer.
func (c *Client) RecentServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if srv, ok := c.seen.fresh(zone, id, c.clock.Now()); ok {
		return srv, nil
	}
	return c.GetServer(ctx, zone, id)
}

// SeenDeleting reports whether this client last saw the server being
// deleted (its DeleteServer was accepted, or a read showed it): a deletion
// is final, so callers may take the server as gone without reading it.
func (c *Client) SeenDeleting(zone scw.Zone, id string) bool {
	return c.seen.deleting(c.zone(zone), id)
}

// observe records the outcome of a call that returned the server (or not);
// written: the call changed it.
func (c *Client) observe(zone scw.Zone, id string, srv *baremetal.Server, err error, written bool) {
	if err != nil {
		c.seen.forget(zone, id) // gone, or the outcome of a write is unknown
		return
	}
	c.seen.observe(srv, c.clock.Now(), written)
}

// ListServers returns every server of the zone (all pages, oldest first)
// that carries all of tags verbatim. The tags are passed to the API as a
// filter and re-checked here, so a looser server-side match never leaks
// foreign servers to the caller. An API failure is an error, never an empty
// list.
func (c *Client) ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error) {
	return c.listServers(ctx, OpListServers, c.zone(zone), tags)
}

func (c *Client) listServers(ctx context.Context, op string, zone scw.Zone, tags []string) ([]*baremetal.Server, error) {
	var out []*baremetal.Server
	err := c.call(ctx, callSpec{op: op, zone: zone, idempotent: true}, func(ctx context.Context) error {
		pageSize := c.pageSize()
		resp, err := c.bm.ListServers(&baremetal.ListServersRequest{
			Zone:      zone,
			Tags:      tags,
			ProjectID: scw.StringPtr(c.cfg.ProjectID),
			PageSize:  &pageSize,
			OrderBy:   baremetal.ListServersRequestOrderByCreatedAtAsc,
		}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return err
		}
		out = out[:0]
		for _, s := range resp.Servers {
			if s != nil && HasTags(s.Tags, tags...) {
				out = append(out, s)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := c.clock.Now()
	for _, s := range out {
		c.seen.observe(s, now, false)
	}
	return out, nil
}

func (c *Client) pageSize() uint32 {
	if c.cfg.PageSize > 0 {
		return c.cfg.PageSize
	}
	return defaultListPageSize
}

// CreateServerRequest orders one Elastic Metal server with no OS
// (install: null); the provider images it from rescue.
type CreateServerRequest struct {
	Zone        scw.Zone
	OfferID     string
	Name        string
	Description string
	Tags        []string
	OptionIDs   []string
	// IdempotencyTag identifies this order uniquely (the NodeClaim tag,
	// "karpenter.sh/nodeclaim=<name>") and must be one of Tags. Before
	// ordering, and after any failure that does not prove the order was
	// rejected, servers carrying it are looked up instead of ordering again.
	IdempotencyTag string
	// Match, when set, says which servers carrying IdempotencyTag may be
	// taken for this order: another cluster of the same name tags its
	// servers with the same NodeClaim tag shape, and its server must never
	// be taken for ours (nil: any).
	Match func(tags []string) bool
}

func (r CreateServerRequest) validate() error {
	var errs []error
	if r.OfferID == "" {
		errs = append(errs, errors.New("OfferID is required"))
	}
	if r.Name == "" {
		errs = append(errs, errors.New("the server Name is required"))
	}
	if len(r.Description) > 255 {
		errs = append(errs, fmt.Errorf("the server Description is %d characters, the API allows 255", len(r.Description)))
	}
	if r.IdempotencyTag == "" {
		errs = append(errs, errors.New("IdempotencyTag is required (e.g. karpenter.sh/nodeclaim=<name>): without it a retried order could buy two servers"))
	} else if !HasTags(r.Tags, r.IdempotencyTag) {
		errs = append(errs, fmt.Errorf("IdempotencyTag %q must be one of Tags", r.IdempotencyTag))
	}
	return errors.Join(errs...)
}

// ErrOrderInFlight is returned when an earlier order for the same idempotency tag failed
// without saying whether the API took it, and the server has not shown in
// listings yet. CreateServer refuses to order again until Config.OrderSettle
// has passed since that order; callers retry later (errors.Is).
var ErrOrderInFlight = errors.New("an earlier order may still be in flight")

// CreateServer finds or orders the server for req.IdempotencyTag. It never
// orders twice for one tag: it lists servers carrying the tag first (a
// previous call or a crashed controller may already have ordered it), sends
// the order at most once per call, and after an ambiguous failure (any
// failure once the request was sent, unless the API answered a 4xx other
// than 408 and 429: a timeout, a 5xx, a reset connection or HTTP/2 stream,
// a GOAWAY, a success whose body cannot be decoded or names no server, the
// caller giving up) it does not send it again: it remembers the order as in flight and, for Config.OrderSettle,
// every later call for the tag only looks for the server (in the order's
// zone and the requested one) and returns ErrOrderInFlight while nothing
// shows. Listings are eventually consistent: a POST that committed late can
// take many seconds to appear. Only once the window has passed with nothing
// found is the order sent again. Servers in status "deleting" are ignored (a
// released earlier attempt). Concurrent calls for one tag within the process
// are serialised. Returns the server and whether this call ordered it.
//
// The memory of orders in flight is this process's: a controller restarted
// inside the window would order again if the lost order has still not shown
// in listings by then. For NodeClaims, package cloudprovider carries the
// fact across processes (its AnnotationOrdering, written before any order);
// the garbage collector's duplicate rule (one server per NodeClaim, the
// spare policy for the others) bounds what is left.
func (c *Client) CreateServer(ctx context.Context, req CreateServerRequest) (*baremetal.Server, bool, error) {
	zone := c.zone(req.Zone)
	if err := req.validate(); err != nil {
		return nil, false, fmt.Errorf("scaleway CreateServer: %w", err)
	}
	// Concurrent calls for one tag in this process queue here, so the
	// second one finds the first one's server instead of ordering.
	unlock := c.createLocks.lock(req.IdempotencyTag)
	defer unlock()
	if srv, err := c.findByTag(ctx, zone, req.IdempotencyTag, req.Match); err != nil || srv != nil {
		return srv, c.adoptShown(zone, req.IdempotencyTag, srv), err
	}
	if srv, settled, err := c.settleLostOrder(ctx, zone, req); settled {
		return srv, srv != nil, err
	}
	srv, err := c.order(ctx, zone, req)
	if err == nil {
		c.log.Info("ordered server", "zone", string(zone), "id", srv.ID, "name", srv.Name, "offer", req.OfferID, "tag", req.IdempotencyTag)
		c.seen.observe(srv, c.clock.Now(), true)
		return srv, true, nil
	}
	if !IsAmbiguous(err) {
		// Only a refusal by the API (out of stock, quota, invalid...) or a
		// failure that proves nothing was sent (throttled, refused
		// connection: already retried inside call) says the order was not
		// taken. Anything else may have bought a server.
		return nil, false, err
	}
	return c.lookForLostOrder(ctx, zone, req, err)
}

// adoptShown reports whether srv, found by its tag, is the server of this
// process's order whose answer was lost: this process bought it (callers
// count what they ordered), and the order is no longer in flight.
func (c *Client) adoptShown(zone scw.Zone, tag string, srv *baremetal.Server) bool {
	_, ordered := c.orders.get(tag)
	if srv == nil || !ordered {
		return false
	}
	c.orders.forget(tag)
	c.log.Info("the server of an order that failed ambiguously shows; adopting it", "zone", string(zone), "id", srv.ID, "tag", tag)
	return true
}

// settleLostOrder deals with an earlier order of this tag whose answer was
// lost. settled says CreateServer ends here: with its server (found in the
// zone it was ordered in), or with ErrOrderInFlight while it may still show.
// Past OrderSettle it is forgotten and a new order may go.
func (c *Client) settleLostOrder(ctx context.Context, zone scw.Zone, req CreateServerRequest) (srv *baremetal.Server, settled bool, err error) {
	p, ok := c.orders.get(req.IdempotencyTag)
	if !ok {
		return nil, false, nil
	}
	if p.zone != zone {
		if srv, err := c.findByTag(ctx, p.zone, req.IdempotencyTag, req.Match); err != nil || srv != nil {
			if srv != nil {
				c.orders.forget(req.IdempotencyTag)
			}
			return srv, true, err
		}
	}
	if waited := c.clock.Now().Sub(p.since); waited < c.cfg.OrderSettle {
		// Transient, whatever the lost order's class: this answer says
		// nothing about the offer now asked for (a lost order that read
		// "refused" or "out of stock" must not set another one aside),
		// only that the claim must wait.
		return nil, true, &Error{Op: OpCreateServer, Zone: p.zone, Ambiguous: true, Class: ClassTransient, redact: c.redact,
			Err: fmt.Errorf("%w (ordered %s ago in %s, looking for it for up to %s; that order failed with: %v)",
				ErrOrderInFlight, waited.Round(time.Second), p.zone, c.cfg.OrderSettle, c.redact(p.err.Error()))}
	}
	c.log.Info("an order that failed ambiguously never showed in listings; ordering again", "zone", string(zone),
		"tag", req.IdempotencyTag, "orderedAt", p.since, "settle", c.cfg.OrderSettle)
	c.orders.forget(req.IdempotencyTag)
	return nil, false, nil
}

// order sends the order itself: one HTTP attempt (only 429/refused
// connections, which prove the order was not taken, are retried inside
// call).
func (c *Client) order(ctx context.Context, zone scw.Zone, req CreateServerRequest) (*baremetal.Server, error) {
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpCreateServer, zone: zone, resource: req.Name}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.CreateServer(&baremetal.CreateServerRequest{
			Zone:        zone,
			OfferID:     req.OfferID,
			ProjectID:   scw.StringPtr(c.cfg.ProjectID),
			Name:        req.Name,
			Description: req.Description,
			Tags:        req.Tags,
			OptionIDs:   req.OptionIDs,
			Install:     nil,
		}, scw.WithContext(ctx))
		return err
	})
	if err == nil && (srv == nil || srv.ID == "") {
		// A success that names no server (an empty or foreign JSON body):
		// the order was taken, which server it bought is unknown.
		err = &Error{Op: OpCreateServer, Zone: zone, Resource: req.Name, Attempts: 1, Ambiguous: true, Class: ClassServerError,
			Err: &UndecodableError{StatusCode: http.StatusOK, Err: errors.New("the answer names no server")}, redact: c.redact}
	}
	return srv, err
}

// lookForLostOrder handles an order that may have been taken (err is
// ambiguous): from now on only look for its server. A quick look after one
// backoff finds an order the listing already shows.
func (c *Client) lookForLostOrder(ctx context.Context, zone scw.Zone, req CreateServerRequest, err error) (*baremetal.Server, bool, error) {
	c.orders.add(req.IdempotencyTag, pendingOrder{zone: zone, since: c.clock.Now(), err: err})
	c.log.Info("order failed ambiguously; looking for its server before any new order", "zone", string(zone),
		"tag", req.IdempotencyTag, "settle", c.cfg.OrderSettle, "error", c.redact(err.Error()))
	select {
	case <-ctx.Done():
		return nil, false, c.markAmbiguous(err)
	case <-c.clock.After(c.backoff(1, 0)):
	}
	found, ferr := c.findByTag(ctx, zone, req.IdempotencyTag, req.Match)
	if ferr == nil && found != nil {
		c.orders.forget(req.IdempotencyTag)
		c.log.Info("order failed ambiguously but the server exists; adopting it", "zone", string(zone), "id", found.ID, "tag", req.IdempotencyTag)
		return found, true, nil
	}
	if ferr != nil {
		err = fmt.Errorf("%w; looking up %s after the failed order also failed: %v", err, req.IdempotencyTag, ferr)
	}
	return nil, false, c.markAmbiguous(err)
}

// pendingOrder is an order whose answer was lost.
type pendingOrder struct {
	zone  scw.Zone
	since time.Time
	err   error
}

// pendingOrders remembers orders whose answer was lost, by idempotency tag.
type pendingOrders struct {
	mu sync.Mutex
	m  map[string]pendingOrder
}

func (p *pendingOrders) add(tag string, o pendingOrder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]pendingOrder{}
	}
	p.m[tag] = o
}

func (p *pendingOrders) get(tag string) (pendingOrder, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.m[tag]
	return o, ok
}

func (p *pendingOrders) forget(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, tag)
}

// OrderInFlight reports whether the last order for tag failed without
// saying whether the API took it, less than Config.OrderSettle ago, and has
// not shown in listings since; zone is where it was sent. While it is in
// flight the order may have been taken: the tag's owner must be given no
// other server (no spare either), only that order's, once it shows.
func (c *Client) OrderInFlight(tag string) (scw.Zone, bool) {
	p, ok := c.orders.get(tag)
	if !ok || c.clock.Now().Sub(p.since) >= c.cfg.OrderSettle {
		return "", false
	}
	return p.zone, true
}

// InFlightOrders is the number of orders whose outcome is still unknown.
func (c *Client) InFlightOrders() int {
	c.orders.mu.Lock()
	defer c.orders.mu.Unlock()
	return len(c.orders.m)
}

func (c *Client) markAmbiguous(err error) error {
	var e *Error
	if errors.As(err, &e) {
		e.Ambiguous = true
		return err
	}
	return &Error{Op: OpCreateServer, Ambiguous: true, Class: Classify(err), Err: err, redact: c.redact}
}

// findByTag returns the oldest non-deleting server of the zone that carries
// tag and that match (when set) accepts, or nil when there is none.
func (c *Client) findByTag(ctx context.Context, zone scw.Zone, tag string, match func(tags []string) bool) (*baremetal.Server, error) {
	servers, err := c.listServers(ctx, OpListServers, zone, []string{tag})
	if err != nil {
		return nil, err
	}
	live := servers[:0:0]
	for _, s := range servers {
		if s.Status != baremetal.ServerStatusDeleting && (match == nil || match(s.Tags)) {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i].CreatedAt, live[j].CreatedAt
		return a != nil && b != nil && a.Before(*b)
	})
	if len(live) > 1 {
		ids := make([]string, len(live))
		for i, s := range live {
			ids[i] = s.ID
		}
		c.log.Info("several servers carry one idempotency tag; using the oldest", "zone", string(zone), "tag", tag, "ids", ids)
	}
	return live[0], nil
}

// UpdateServerTags replaces the server's whole tag list. Callers that
// change one key should use SetTag: a read-modify-write of the list races
// with other writers (the API has no compare-and-swap).
func (c *Client) UpdateServerTags(ctx context.Context, zone scw.Zone, id string, tags []string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if tags == nil {
		tags = []string{}
	}
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpUpdateServer, zone: zone, resource: id, idempotent: true, write: true}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.UpdateServer(&baremetal.UpdateServerRequest{Zone: zone, ServerID: id, Tags: &tags}, scw.WithContext(ctx))
		return err
	})
	if err == nil && (srv == nil || srv.ID != id) {
		// A success that does not show the server (an empty or foreign
		// body): the update was applied, and callers go on from the tags
		// they get back, so they get the server as it now reads, with the
		// tags just written (a read may lag behind the write).
		c.seen.forget(zone, id)
		cur, gerr := c.GetServer(ctx, zone, id)
		if gerr != nil {
			return nil, gerr
		}
		written := *cur
		written.Tags = slices.Clone(tags)
		c.seen.observe(&written, c.clock.Now(), true)
		return &written, nil
	}
	c.observe(zone, id, srv, err, true)
	return srv, err
}

// SetTag sets "key=value" on the server, replacing any "key=..." and keeping
// every other tag. It reads the server by ID (FreshServer; or takes the
// state this process's write or read by ID just returned, never a
// listing's), edits the list and writes it back only when it changed. Writers in this process are serialised per server;
// the API offers no compare-and-swap, so a concurrent writer elsewhere can
// still lose an update between the read and the write: keep each key owned
// by one writer (the phase tag by the install pipeline).
func (c *Client) SetTag(ctx context.Context, zone scw.Zone, id, key, value string) (*baremetal.Server, error) {
	return c.mutateTags(ctx, zone, id, func(tags []string) ([]string, bool) { return SetTagIn(tags, key, value) })
}

// RemoveTag drops every "key=..." tag of the server, keeping the rest.
func (c *Client) RemoveTag(ctx context.Context, zone scw.Zone, id, key string) (*baremetal.Server, error) {
	return c.mutateTags(ctx, zone, id, func(tags []string) ([]string, bool) { return RemoveTagIn(tags, key) })
}

// EditTags applies edit to the server's current tags and writes the result
// back in one update when edit reports a change: several keys change
// together (a phase and the time it started; a spare's claim and phase).
// The same in-process serialisation and caveat as SetTag apply.
func (c *Client) EditTags(ctx context.Context, zone scw.Zone, id string, edit func(tags []string) ([]string, bool)) (*baremetal.Server, error) {
	return c.mutateTags(ctx, zone, id, edit)
}

func (c *Client) mutateTags(ctx context.Context, zone scw.Zone, id string, edit func([]string) ([]string, bool)) (*baremetal.Server, error) {
	zone = c.zone(zone)
	unlock := c.tagLocks.lock(string(zone) + "/" + id)
	defer unlock()
	// The state our own write or a read by ID just returned is as good as
	// a new read; a listing's never is (it may show the server as it was
	// before another process's write: FreshServer).
	srv, ok := c.seen.freshBase(zone, id, c.clock.Now(), c.trustedSince())
	if !ok {
		var err error
		if srv, err = c.FreshServer(ctx, zone, id); err != nil {
			return nil, err
		}
	}
	tags, changed := edit(slices.Clone(srv.Tags))
	if !changed {
		return srv, nil
	}
	return c.UpdateServerTags(ctx, zone, id, tags)
}

// DeleteServer releases the server. A server already being deleted (by an
// earlier call, or an earlier attempt of this one whose answer was lost) is
// a success and returns the server in status "deleting"; a server already
// gone gives an error for which IsNotFound is true.
func (c *Client) DeleteServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if id == "" {
		return nil, errors.New("scaleway DeleteServer: server id is required")
	}
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpDeleteServer, zone: zone, resource: id, idempotent: true, write: true}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.DeleteServer(&baremetal.DeleteServerRequest{Zone: zone, ServerID: id}, scw.WithContext(ctx))
		return err
	})
	c.observe(zone, id, srv, err, true)
	if err != nil && IsTransientState(err) {
		cur, gerr := c.GetServer(ctx, zone, id)
		switch {
		case gerr != nil && IsNotFound(gerr):
			return nil, gerr
		case gerr == nil && cur.Status == baremetal.ServerStatusDeleting:
			return cur, nil
		}
	}
	return srv, err
}

// RebootServer reboots into bootType (normal or rescue). sshKeyIDs are the
// IAM keys the rescue system accepts. A reboot is not idempotent: after any
// failure once the request left, but a 4xx refusal (a timeout, a 5xx, a
// reset, an undecodable answer), the error is returned with IsAmbiguous
// true, and the caller decides from the server's state (e.g. the Poller)
// whether to reboot again.
func (c *Client) RebootServer(ctx context.Context, zone scw.Zone, id string, bootType baremetal.ServerBootType, sshKeyIDs []string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	if err := checkBootType(bootType); err != nil {
		return nil, fmt.Errorf("scaleway RebootServer: %w", err)
	}
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpRebootServer, zone: zone, resource: id}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.RebootServer(&baremetal.RebootServerRequest{Zone: zone, ServerID: id, BootType: bootType, SSHKeyIDs: sshKeyIDs}, scw.WithContext(ctx))
		return err
	})
	c.observe(zone, id, srv, err, true)
	return srv, err
}

func checkBootType(b baremetal.ServerBootType) error {
	if b != baremetal.ServerBootTypeNormal && b != baremetal.ServerBootTypeRescue {
		return fmt.Errorf("bootType %q must be %q or %q", b, baremetal.ServerBootTypeNormal, baremetal.ServerBootTypeRescue)
	}
	return nil
}

// StartServer powers the server on (normal boot). Not idempotent: see RebootServer.
func (c *Client) StartServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpStartServer, zone: zone, resource: id}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.StartServer(&baremetal.StartServerRequest{Zone: zone, ServerID: id, BootType: baremetal.ServerBootTypeNormal}, scw.WithContext(ctx))
		return err
	})
	return srv, err
}

// StopServer powers the server off. Not idempotent: see RebootServer.
func (c *Client) StopServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	var srv *baremetal.Server
	err := c.call(ctx, callSpec{op: OpStopServer, zone: zone, resource: id}, func(ctx context.Context) error {
		var err error
		srv, err = c.bm.StopServer(&baremetal.StopServerRequest{Zone: zone, ServerID: id}, scw.WithContext(ctx))
		return err
	})
	return srv, err
}

// AddServerOption enables an option (e.g. Private Network) on the server.
// Idempotent: an option already on the server is not added again, also when
// an earlier attempt failed ambiguously.
func (c *Client) AddServerOption(ctx context.Context, zone scw.Zone, serverID, optionID string) (*baremetal.Server, error) {
	zone = c.zone(zone)
	srv, err := c.GetServer(ctx, zone, serverID)
	if err != nil {
		return nil, err
	}
	if hasOption(srv, optionID) {
		return srv, nil
	}
	var out *baremetal.Server
	err = c.call(ctx, callSpec{op: OpAddServerOption, zone: zone, resource: serverID}, func(ctx context.Context) error {
		var err error
		out, err = c.bm.AddOptionServer(&baremetal.AddOptionServerRequest{Zone: zone, ServerID: serverID, OptionID: optionID}, scw.WithContext(ctx))
		return err
	})
	if err != nil && IsAmbiguous(err) || err != nil && IsRetryable(err) {
		if srv, gerr := c.GetServer(ctx, zone, serverID); gerr == nil && hasOption(srv, optionID) {
			return srv, nil
		}
	}
	return out, err
}

func hasOption(s *baremetal.Server, optionID string) bool {
	for _, o := range s.Options {
		if o != nil && o.ID == optionID {
			return true
		}
	}
	return false
}

// ListOptions lists the options that can be enabled in the zone.
func (c *Client) ListOptions(ctx context.Context, zone scw.Zone) ([]*baremetal.Option, error) {
	zone = c.zone(zone)
	var out []*baremetal.Option
	err := c.call(ctx, callSpec{op: OpListOptions, zone: zone, idempotent: true}, func(ctx context.Context) error {
		resp, err := c.bm.ListOptions(&baremetal.ListOptionsRequest{Zone: zone}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return err
		}
		out = resp.Options
		return nil
	})
	return out, err
}

// PrivateNetworkOptionID finds the zone's Private Network option (the one
// whose private_network field is set).
func (c *Client) PrivateNetworkOptionID(ctx context.Context, zone scw.Zone) (string, error) {
	opts, err := c.ListOptions(ctx, zone)
	if err != nil {
		return "", err
	}
	for _, o := range opts {
		if o != nil && o.PrivateNetwork != nil {
			return o.ID, nil
		}
	}
	return "", fmt.Errorf("scaleway: zone %s offers no Private Network option", c.zone(zone))
}

// ListOffers lists the zone's offers for a billing period (hourly, monthly;
// empty for both). The catalog package has its own refresh; this is for
// callers that need a one-off lookup.
func (c *Client) ListOffers(ctx context.Context, zone scw.Zone, period baremetal.OfferSubscriptionPeriod) ([]*baremetal.Offer, error) {
	zone = c.zone(zone)
	var out []*baremetal.Offer
	err := c.call(ctx, callSpec{op: OpListOffers, zone: zone, idempotent: true}, func(ctx context.Context) error {
		resp, err := c.bm.ListOffers(&baremetal.ListOffersRequest{Zone: zone, SubscriptionPeriod: period}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return err
		}
		out = resp.Offers
		return nil
	})
	return out, err
}
