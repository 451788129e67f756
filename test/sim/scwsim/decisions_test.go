package scwsim

import "testing"

// TestCreateRequestCheck pins which create requests the API refuses before
// it looks at anything it holds, and on which argument.
func TestCreateRequestCheck(t *testing.T) {
	const offer = "a5c4b5a5-1f7a-4b5f-9d83-5d1e3a0f9a11"
	for _, tc := range []struct {
		name string
		req  createRequest
		arg  string // "" when accepted
	}{
		{"no offer", createRequest{Name: "n"}, "offer_id"},
		{"offer not a UUID", createRequest{OfferID: "x", Name: "n"}, "offer_id"},
		{"no name", createRequest{OfferID: offer}, "name"},
		{"empty tag", createRequest{OfferID: offer, Name: "n", Tags: []string{"a", ""}}, "tags"},
		{"fine", createRequest{OfferID: offer, Name: "n", Tags: []string{"a"}}, ""},
	} {
		e := tc.req.check()
		switch {
		case tc.arg == "" && e != nil:
			t.Errorf("%s: refused: %v", tc.name, e.body)
		case tc.arg != "" && (e == nil || e.body.(map[string]any)["details"].([]argDetail)[0].ArgumentName != tc.arg):
			t.Errorf("%s: got %v, want a refusal on %s", tc.name, e, tc.arg)
		}
	}
}

// TestListOrders pins the order_by values each list accepts: server private
// networks have no name order, SSH keys do.
func TestListOrders(t *testing.T) {
	for by, ok := range map[string]bool{"": true, "created_at_asc": true, "updated_at_desc": true, "name_asc": false, "bogus": false} {
		if _, got := pnOrder(by); got != ok {
			t.Errorf("pnOrder(%q) accepted %v, want %v", by, got, ok)
		}
	}
	for by, ok := range map[string]bool{"": true, "created_at_desc": true, "name_asc": true, "name_desc": true, "bogus": false} {
		if _, got := keyOrder(by); got != ok {
			t.Errorf("keyOrder(%q) accepted %v, want %v", by, got, ok)
		}
	}
}
