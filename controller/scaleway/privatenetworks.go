package scaleway

import (
	"context"
	"errors"
	"fmt"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// ListServerPrivateNetworks lists the server's Private Network attachments
// (baremetal v3). Each carries its VLAN id (Vlan, set once attached), which
// the Talos config needs.
func (c *Client) ListServerPrivateNetworks(ctx context.Context, zone scw.Zone, serverID string) ([]*baremetalv3.ServerPrivateNetwork, error) {
	zone = c.zone(zone)
	if serverID == "" {
		return nil, errors.New("scaleway ListServerPrivateNetworks: server id is required")
	}
	var out []*baremetalv3.ServerPrivateNetwork
	err := c.call(ctx, callSpec{op: OpListServerPNs, zone: zone, resource: serverID, idempotent: true}, func(ctx context.Context) error {
		resp, err := c.pn.ListServerPrivateNetworks(&baremetalv3.PrivateNetworkAPIListServerPrivateNetworksRequest{
			Zone: zone, ServerID: scw.StringPtr(serverID),
		}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return err
		}
		out = out[:0]
		for _, p := range resp.ServerPrivateNetworks {
			if p != nil && p.ServerID == serverID {
				out = append(out, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AttachPrivateNetwork attaches the server to a Private Network (the
// server's Private Network option must be enabled: AddServerOption with
// PrivateNetworkOptionID). Idempotent: an existing attachment is returned
// as is, and after an ambiguous failure the attachments are read again
// before giving up. The returned attachment's Vlan may be nil while its
// status is "attaching"; poll ListServerPrivateNetworks until "attached".
func (c *Client) AttachPrivateNetwork(ctx context.Context, zone scw.Zone, serverID, privateNetworkID string) (*baremetalv3.ServerPrivateNetwork, error) {
	zone = c.zone(zone)
	if serverID == "" || privateNetworkID == "" {
		return nil, errors.New("scaleway AttachPrivateNetwork: server id and private network id are required")
	}
	find := func() (*baremetalv3.ServerPrivateNetwork, error) {
		return c.findAttachment(ctx, zone, serverID, privateNetworkID)
	}
	if p, err := find(); err != nil || p != nil {
		return p, err
	}
	var out *baremetalv3.ServerPrivateNetwork
	err := c.call(ctx, callSpec{op: OpAttachPN, zone: zone, resource: serverID}, func(ctx context.Context) error {
		var err error
		out, err = c.pn.AddServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{
			Zone: zone, ServerID: serverID, PrivateNetworkID: privateNetworkID,
		}, scw.WithContext(ctx))
		return err
	})
	if err != nil {
		if p, ok := foundAfter(err, find); ok {
			return p, nil
		}
		return nil, err
	}
	return out, nil
}

// findAttachment returns the server's attachment to privateNetworkID that
// is not being detached, or nil.
func (c *Client) findAttachment(ctx context.Context, zone scw.Zone, serverID, privateNetworkID string) (*baremetalv3.ServerPrivateNetwork, error) {
	list, err := c.ListServerPrivateNetworks(ctx, zone, serverID)
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		if p.PrivateNetworkID == privateNetworkID && p.Status != baremetalv3.ServerPrivateNetworkStatusDetaching {
			return p, nil
		}
	}
	return nil, nil
}

// VLANs maps private network ID -> VLAN id for the attachments that have one.
func VLANs(list []*baremetalv3.ServerPrivateNetwork) map[string]uint32 {
	out := make(map[string]uint32, len(list))
	for _, p := range list {
		if p != nil && p.Vlan != nil {
			out[p.PrivateNetworkID] = *p.Vlan
		}
	}
	return out
}

// WaitPrivateNetworksAttached polls the server's attachments (every
// Config.PollInterval) until each of privateNetworkIDs is "attached" with a
// VLAN, and returns private network ID -> VLAN. An attachment in status
// "error", or one that is missing (never attached), ends the wait with an
// error; ctx bounds it. Attachments take seconds, so per-server polling is
// cheap here, unlike server delivery.
func (c *Client) WaitPrivateNetworksAttached(ctx context.Context, zone scw.Zone, serverID string, privateNetworkIDs []string) (map[string]uint32, error) {
	zone = c.zone(zone)
	for {
		list, err := c.ListServerPrivateNetworks(ctx, zone, serverID)
		if err != nil {
			return nil, err
		}
		vlans, err := attachedVLANs(list, zone, serverID, privateNetworkIDs)
		if err != nil {
			return nil, err
		}
		if vlans != nil {
			return vlans, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for private networks of server %s in %s: %w", serverID, zone, ctx.Err())
		case <-c.clock.After(c.cfg.PollInterval):
		}
	}
}

// attachedVLANs returns private network ID -> VLAN when each of ids is
// attached with a VLAN, nil while some are still attaching, and an error for
// an attachment that is missing or failed: waiting longer would not help.
func attachedVLANs(list []*baremetalv3.ServerPrivateNetwork, zone scw.Zone, serverID string, ids []string) (map[string]uint32, error) {
	byPN := map[string]*baremetalv3.ServerPrivateNetwork{}
	for _, p := range list {
		byPN[p.PrivateNetworkID] = p
	}
	done := true
	for _, id := range ids {
		p := byPN[id]
		switch {
		case p == nil:
			return nil, fmt.Errorf("server %s in %s is not attached to private network %s", serverID, zone, id)
		case p.Status == baremetalv3.ServerPrivateNetworkStatusError:
			return nil, fmt.Errorf("attachment of server %s in %s to private network %s failed (status error)", serverID, zone, id)
		case p.Status != baremetalv3.ServerPrivateNetworkStatusAttached || p.Vlan == nil:
			done = false
		}
	}
	if !done {
		return nil, nil
	}
	out := map[string]uint32{}
	for _, id := range ids {
		out[id] = *byPN[id].Vlan
	}
	return out, nil
}

// AttachPrivateNetworks gives the server its Private Network option (unless
// it has it) and attaches it to each of privateNetworkIDs it is not attached
// to yet. Recorded: the API accepts the attach right after the option was
// added, while it is still "enabling". An API that answers 412 meanwhile (or
// is slow to see the option) is retried every Config.PollInterval while the
// option is enabling or enabled, for at most Config.SettleWait; a 412 with
// the option missing or disabling is returned at once.
func (c *Client) AttachPrivateNetworks(ctx context.Context, zone scw.Zone, serverID string, privateNetworkIDs []string) error {
	if len(privateNetworkIDs) == 0 {
		return nil
	}
	zone = c.zone(zone)
	optID, err := c.PrivateNetworkOptionID(ctx, zone)
	if err != nil {
		return fmt.Errorf("finding the private network option: %w", err)
	}
	if _, err := c.AddServerOption(ctx, zone, serverID, optID); err != nil {
		return fmt.Errorf("enabling private networks: %w", err)
	}
	for _, id := range privateNetworkIDs {
		if err := c.attachOnceOptionAllows(ctx, zone, serverID, optID, id); err != nil {
			return fmt.Errorf("attaching private network %s: %w", id, err)
		}
	}
	return nil
}

func (c *Client) attachOnceOptionAllows(ctx context.Context, zone scw.Zone, serverID, optionID, privateNetworkID string) error {
	deadline := c.clock.Now().Add(c.cfg.SettleWait)
	for {
		_, err := c.AttachPrivateNetwork(ctx, zone, serverID, privateNetworkID)
		if err == nil || !IsPrecondition(err) {
			return err
		}
		srv, gerr := c.GetServer(ctx, zone, serverID)
		if gerr != nil {
			return fmt.Errorf("%w (reading the server's options: %v)", err, gerr)
		}
		status := optionStatus(srv, optionID)
		switch {
		case status != baremetal.ServerOptionOptionStatusOptionStatusEnabling && status != baremetal.ServerOptionOptionStatusOptionStatusEnable:
			return fmt.Errorf("%w (the server's Private Network option is %q)", err, status)
		case !c.clock.Now().Before(deadline):
			return fmt.Errorf("%w (still refused %s after the option was added; option %s)", err, c.cfg.SettleWait, status)
		}
		c.log.Info("private network attach refused while the option settles; retrying", "zone", string(zone), "id", serverID,
			"privateNetwork", privateNetworkID, "option", status, "error", c.redact(err.Error()))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-c.clock.After(c.cfg.PollInterval):
		}
	}
}

// optionStatus is the status of the server's option, "" when it has none.
func optionStatus(s *baremetal.Server, optionID string) baremetal.ServerOptionOptionStatus {
	for _, o := range s.Options {
		if o != nil && o.ID == optionID {
			return o.Status
		}
	}
	return ""
}
