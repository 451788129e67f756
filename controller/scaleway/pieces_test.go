package scaleway

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
)

// TestDefaultToSetsOnlyZeroValues: WithDefaults is a list of defaultTo
// calls, so a set field must survive and a zero one take the default.
func TestDefaultToSetsOnlyZeroValues(t *testing.T) {
	d := time.Duration(0)
	defaultTo(&d, time.Second)
	if d != time.Second {
		t.Fatalf("zero duration: got %s, want 1s", d)
	}
	defaultTo(&d, time.Minute)
	if d != time.Second {
		t.Fatalf("set duration overwritten: got %s", d)
	}
	s := "set"
	defaultTo(&s, "default")
	if s != "set" {
		t.Fatalf("set string overwritten: got %q", s)
	}
	c := Config{}.WithDefaults()
	if c.APIURL != DefaultAPIURL || c.SettleWait != DefaultSettleWait || c.Retry.ThrottleWait != DefaultThrottleWait {
		t.Fatalf("WithDefaults left a zero field: %+v", c)
	}
}

// TestClassifyClientErrorWords: a 4xx saying the server is busy or not
// delivered is transient, any other 4xx refuses the request.
func TestClassifyClientErrorWords(t *testing.T) {
	for msg, want := range map[string]Class{
		"server is not delivered":        ClassTransient,
		"resource is in transient state": ClassTransient,
		"the name is too long":           ClassInvalid,
		"":                               ClassInvalid,
	} {
		if got := classifyClientError(msg); got != want {
			t.Errorf("classifyClientError(%q) = %v, want %v", msg, got, want)
		}
	}
	if c, ok := classifyWords("not enough stock"); !ok || c != ClassOutOfStock {
		t.Errorf("classifyWords(stock) = %v, %v", c, ok)
	}
	if _, ok := classifyWords("bad request"); ok {
		t.Errorf("classifyWords decided a message without its words")
	}
}

// TestAttachedVLANs: all attached gives the map, one still attaching gives
// nil (wait on), one missing or failed is an error at once.
func TestAttachedVLANs(t *testing.T) {
	vlan := func(v uint32) *uint32 { return &v }
	attached := &baremetalv3.ServerPrivateNetwork{PrivateNetworkID: "a", Status: baremetalv3.ServerPrivateNetworkStatusAttached, Vlan: vlan(7)}
	attaching := &baremetalv3.ServerPrivateNetwork{PrivateNetworkID: "b", Status: baremetalv3.ServerPrivateNetworkStatusAttaching}
	failed := &baremetalv3.ServerPrivateNetwork{PrivateNetworkID: "c", Status: baremetalv3.ServerPrivateNetworkStatusError}

	got, err := attachedVLANs([]*baremetalv3.ServerPrivateNetwork{attached}, "fr-par-2", "srv", []string{"a"})
	if err != nil || !reflect.DeepEqual(got, map[string]uint32{"a": 7}) {
		t.Fatalf("attached: %v, %v", got, err)
	}
	got, err = attachedVLANs([]*baremetalv3.ServerPrivateNetwork{attached, attaching}, "fr-par-2", "srv", []string{"a", "b"})
	if err != nil || got != nil {
		t.Fatalf("attaching: want nil, nil; got %v, %v", got, err)
	}
	_, err = attachedVLANs([]*baremetalv3.ServerPrivateNetwork{attached}, "fr-par-2", "srv", []string{"a", "x"})
	if err == nil || !strings.Contains(err.Error(), "is not attached to private network x") {
		t.Fatalf("missing: %v", err)
	}
	_, err = attachedVLANs([]*baremetalv3.ServerPrivateNetwork{failed}, "fr-par-2", "srv", []string{"c"})
	if err == nil || !strings.Contains(err.Error(), "failed (status error)") {
		t.Fatalf("failed: %v", err)
	}
}

// TestFoundAfterOnlyForUnknownOutcomes: a plain refusal is final, an
// ambiguous failure looks again.
func TestFoundAfterOnlyForUnknownOutcomes(t *testing.T) {
	k := &baremetalv3.ServerPrivateNetwork{PrivateNetworkID: "a"}
	find := func() (*baremetalv3.ServerPrivateNetwork, error) { return k, nil }
	if _, ok := foundAfter(&Error{Class: ClassInvalid, Err: errors.New("no")}, find); ok {
		t.Fatalf("an invalid request looked again")
	}
	if got, ok := foundAfter(&Error{Class: ClassServerError, Ambiguous: true, Err: errors.New("lost")}, find); !ok || got != k {
		t.Fatalf("an ambiguous failure did not look again: %v %v", got, ok)
	}
}
