package talosgen

import (
	"sort"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
)

const redacted = "<redacted>"

// scrub replaces every known secret value in msg. It is the last line of
// defence: errors are built without values in the first place, but messages
// from machinery (validation, patches) may quote config fragments.
func scrub(msg string, secretValues []string) string {
	vals := make([]string, 0, len(secretValues))

	for _, v := range secretValues {
		v = strings.TrimSpace(v)
		// short strings would blank out ordinary words
		if len(v) >= 8 {
			vals = append(vals, v)
		}
	}

	// longest first, so a token is not half-replaced by a shorter secret
	sort.Slice(vals, func(a, b int) bool { return len(vals[a]) > len(vals[b]) })

	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, redacted)
	}

	return msg
}

// scrubbedError keeps errors.Is/As working on the original chain while its
// message is scrubbed.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func scrubError(err error, secretValues []string) error {
	if err == nil {
		return nil
	}

	msg := scrub(err.Error(), secretValues)
	if msg == err.Error() {
		return err
	}

	return &scrubbedError{msg: msg, err: err}
}

// secretsOfConfig lists the secret values of a machine config.
func secretsOfConfig(cfg coreconfig.Provider) []string {
	c := cfg.RawV1Alpha1()
	if c == nil {
		return nil
	}

	var out []string

	if m := c.MachineConfig; m != nil {
		out = append(out, m.MachineToken)

		if m.MachineCA != nil {
			out = append(out, string(m.MachineCA.Key))
		}
	}

	if cl := c.ClusterConfig; cl != nil {
		out = append(out, cl.BootstrapToken, cl.ClusterSecret, cl.ClusterAESCBCEncryptionSecret, cl.ClusterSecretboxEncryptionSecret)

		if cl.ClusterCA != nil {
			out = append(out, string(cl.ClusterCA.Key))
		}
	}

	return out
}
