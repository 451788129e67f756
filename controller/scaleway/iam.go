package scaleway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
)

// EnsureSSHKey returns the ID of the project's IAM SSH key holding
// publicKey (an authorized_keys line), registering it under name when no
// key of the project holds it. Keys are matched on the key material, not the
// comment or the name, so a renamed key is reused and a rotated key (same
// name, new material) is registered anew. Safe to call on every start.
func (c *Client) EnsureSSHKey(ctx context.Context, name, publicKey string) (string, error) {
	if name == "" {
		return "", errors.New("scaleway EnsureSSHKey: name is required")
	}
	want, err := normalizeAuthorizedKey(publicKey)
	if err != nil {
		return "", fmt.Errorf("scaleway EnsureSSHKey: publicKey: %w", err)
	}
	// The SDK's IAM calls update shared client state (API metadata) without
	// a lock; serialising them keeps concurrent callers race-free.
	c.iamMu.Lock()
	defer c.iamMu.Unlock()

	find := func() (*iam.SSHKey, error) { return c.findSSHKey(ctx, name, want) }
	if k, err := find(); err != nil {
		return "", err
	} else if k != nil {
		return k.ID, nil
	}
	created, err := c.createSSHKey(ctx, name, publicKey)
	if err != nil {
		if k, ok := foundAfter(err, find); ok {
			return k.ID, nil
		}
		return "", err
	}
	c.log.Info("registered ssh key", "name", name, "id", created.ID, "fingerprint", created.Fingerprint)
	return created.ID, nil
}

// createSSHKey registers publicKey under name once (the call retries as
// its policy says) and checks that the answer names the key.
func (c *Client) createSSHKey(ctx context.Context, name, publicKey string) (*iam.SSHKey, error) {
	var created *iam.SSHKey
	err := c.call(ctx, callSpec{op: OpCreateSSHKey, resource: name}, func(ctx context.Context) error {
		var err error
		created, err = c.iam.CreateSSHKey(&iam.CreateSSHKeyRequest{Name: name, PublicKey: strings.TrimSpace(publicKey), ProjectID: c.cfg.ProjectID}, scw.WithContext(ctx))
		return err
	})
	if err == nil && (created == nil || created.ID == "") {
		// A success that names no key: it was registered, under an ID
		// the answer does not give.
		err = &Error{Op: OpCreateSSHKey, Resource: name, Attempts: 1, Ambiguous: true, Class: ClassServerError,
			Err: &UndecodableError{StatusCode: http.StatusOK, Err: errors.New("the answer names no key")}, redact: c.redact}
	}
	return created, err
}

// foundAfter looks again after a create that failed in a way that may have
// done it all the same (ambiguous or retryable), and returns what find sees.
func foundAfter[T comparable](err error, find func() (T, error)) (T, bool) {
	var zero T
	if !IsAmbiguous(err) && !IsRetryable(err) {
		return zero, false
	}
	v, ferr := find()
	if ferr != nil || v == zero {
		return zero, false
	}
	return v, true
}

// ListSSHKeys lists the IAM SSH keys of the configured project (all pages).
func (c *Client) ListSSHKeys(ctx context.Context) ([]*iam.SSHKey, error) {
	c.iamMu.Lock()
	defer c.iamMu.Unlock()
	return c.listSSHKeys(ctx)
}

// FindSSHKey returns the ID and name of the project's enabled IAM SSH key
// holding publicKey (preferring one called name); "" when none does.
func (c *Client) FindSSHKey(ctx context.Context, name, publicKey string) (id, keyName string, err error) {
	want, err := normalizeAuthorizedKey(publicKey)
	if err != nil {
		return "", "", fmt.Errorf("scaleway FindSSHKey: publicKey: %w", err)
	}
	c.iamMu.Lock()
	defer c.iamMu.Unlock()
	k, err := c.findSSHKey(ctx, name, want)
	if err != nil || k == nil {
		return "", "", err
	}
	return k.ID, k.Name, nil
}

// findSSHKey is FindSSHKey with iamMu held and the key normalised.
func (c *Client) findSSHKey(ctx context.Context, name, want string) (*iam.SSHKey, error) {
	keys, err := c.listSSHKeys(ctx)
	if err != nil {
		return nil, err
	}
	var byName *iam.SSHKey
	for _, k := range keys {
		if k == nil || k.Disabled {
			continue
		}
		if got, err := normalizeAuthorizedKey(k.PublicKey); err == nil && got == want {
			if k.Name == name {
				return k, nil
			}
			if byName == nil {
				byName = k
			}
		}
	}
	return byName, nil
}

// listSSHKeys is ListSSHKeys with iamMu held.
func (c *Client) listSSHKeys(ctx context.Context) ([]*iam.SSHKey, error) {
	var keys []*iam.SSHKey
	err := c.call(ctx, callSpec{op: OpListSSHKeys, idempotent: true}, func(ctx context.Context) error {
		resp, err := c.iam.ListSSHKeys(&iam.ListSSHKeysRequest{ProjectID: scw.StringPtr(c.cfg.ProjectID)}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return err
		}
		keys = resp.SSHKeys
		return nil
	})
	return keys, err
}

// DeleteSSHKey removes an IAM SSH key; a key already gone is not an error.
func (c *Client) DeleteSSHKey(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("scaleway DeleteSSHKey: id is required")
	}
	c.iamMu.Lock()
	defer c.iamMu.Unlock()
	err := c.call(ctx, callSpec{op: OpDeleteSSHKey, resource: id, idempotent: true, write: true}, func(ctx context.Context) error {
		return c.iam.DeleteSSHKey(&iam.DeleteSSHKeyRequest{SSHKeyID: id}, scw.WithContext(ctx))
	})
	if err != nil && !IsNotFound(err) {
		return err
	}
	if err == nil {
		c.log.Info("removed ssh key", "id", id)
	}
	return nil
}

// normalizeAuthorizedKey returns "type base64" of an authorized_keys line,
// dropping options and comment.
func normalizeAuthorizedKey(s string) (string, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(s)))
	if err != nil {
		return "", fmt.Errorf("not an authorized_keys line: %w", err)
	}
	return string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(k))), nil
}
