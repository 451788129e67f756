// Package canary is the secret canary: it runs a node's whole life and a
// failing install against bin/karpenter-scaleway-em, with every secret the
// controller handles known to the test, and looks for any of them in what
// the controller shows to others: its log, Kubernetes Events, NodeClaim and
// NodeClass objects, /metrics, and em-imager's report and progress (what
// the rescue host sent back). The scanner is this file; the run is
// canary_test.go.
//
//	make build tools && go test -count=1 -v ./test/e2e/canary/
package canary

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
)

// MinLen is the shortest secret the scanner accepts: shorter values would
// match by chance.
const MinLen = 12

// Secret is a value that must not be shown, and what it is.
type Secret struct {
	Name  string
	Value string
}

// Artefact is something the controller shows to others.
type Artefact struct {
	Name string
	Data []byte
}

// Hit is a secret found in an artefact, in one of its encodings.
type Hit struct {
	Secret, Artefact, Encoding string
	Context                    string // the bytes around it
}

func (h Hit) String() string {
	return fmt.Sprintf("%s found in %s (%s): ...%s...", h.Secret, h.Artefact, h.Encoding, h.Context)
}

// encodings are the forms a leaked value takes in logs and objects: as is,
// base64 (a Secret's data, a bundle's keys), URL-escaped (a query), hex.
func encodings(v string) map[string]string {
	out := map[string]string{
		"raw":    v,
		"base64": base64.StdEncoding.EncodeToString([]byte(v)),
		"hex":    hex.EncodeToString([]byte(v)),
	}
	if q := url.QueryEscape(v); q != v {
		out["url-escaped"] = q
	}
	return out
}

// Scan reports every secret found in any artefact. It refuses (error) a
// secret shorter than MinLen.
func Scan(secrets []Secret, artefacts []Artefact) ([]Hit, error) {
	var hits []Hit
	for _, s := range secrets {
		if len(s.Value) < MinLen {
			return nil, fmt.Errorf("secret %s is %d bytes, shorter than %d: it would match by chance", s.Name, len(s.Value), MinLen)
		}
		for enc, form := range encodings(s.Value) {
			for _, a := range artefacts {
				if i := bytes.Index(a.Data, []byte(form)); i >= 0 {
					// The context shows where, never the value itself.
					from, to := max(0, i-40), min(len(a.Data), i+len(form)+40)
					ctx := string(a.Data[from:i]) + "<" + s.Name + ">" + string(a.Data[i+len(form):to])
					hits = append(hits, Hit{Secret: s.Name, Artefact: a.Name, Encoding: enc, Context: ctx})
				}
			}
		}
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].String() < hits[j].String() })
	return hits, nil
}
