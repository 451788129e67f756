package scaleway

import (
	"context"
	"errors"
	"fmt"

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
	if err != nil && (IsAmbiguous(err) || IsRetryable(err)) {
		if p, ferr := find(); ferr == nil && p != nil {
			return p, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
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
		byPN := map[string]*baremetalv3.ServerPrivateNetwork{}
		for _, p := range list {
			byPN[p.PrivateNetworkID] = p
		}
		done := true
		for _, id := range privateNetworkIDs {
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
		if done {
			out := map[string]uint32{}
			for _, id := range privateNetworkIDs {
				out[id] = *byPN[id].Vlan
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for private networks of server %s in %s: %w", serverID, zone, ctx.Err())
		case <-c.clock.After(c.cfg.PollInterval):
		}
	}
}
