// Package scwsim is a simulated Scaleway API for Elastic Metal: the
// baremetal v1 paths (offers, options, OS, servers and their actions), the
// baremetal v3 server private networks and the IAM v1alpha1 SSH keys, with
// the real JSON shapes, status codes and server state sequences, so that the
// provider can be driven end to end by the real scaleway-sdk-go client.
//
// Use it in a test:
//
//	opts, _ := scwsim.Profile(scwsim.ProfileTest) // or "fast", "realistic"
//	opts.Host = myHost                            // rescue SSH + Talos API, optional
//	sim := scwsim.New(opts)
//	ts := httptest.NewServer(sim.Handler())       // or: url, err := sim.Start()
//	defer ts.Close(); defer sim.Close()
//	client, _ := scw.NewClient(scw.WithAPIURL(ts.URL),
//		scw.WithAuth("SCWXXXXXXXXXXXXXXXXX", sim.SecretKey()), scw.WithDefaultZone(scw.ZoneFrPar2))
//
// Control it at runtime: SetStock, SetQuota, Inject (5xx, 429 with
// Retry-After, timeouts, delays, servers stuck in a state or going to
// error), ForceStatus, SetHost; Options.RateLimit throttles like a real key
// (429 + Retry-After) and Options.Jitter spreads phase durations. Inspect it
// with Calls (method, path, query, status, time, duration, fault, server,
// create tags), CountCalls, CreatesByTag (duplicate orders per NodeClaim),
// CallsForServer, Servers, Server, History, PrivateNetworks, Stock.
//
// Run its tests: go test -count=1 -race ./test/sim/scwsim/...
//
// # State machine
//
// CreateServer (install: null) answers "delivering" ("ordered" first when
// Delays.Order > 0 or an install is given), then "ready" after
// Delays.Delivery: the IPs, domain and ping appear, and Host.Boot(normal) is
// called. Reboot answers "stopping" (Host.PowerOff), then "starting", then
// "ready" with the requested boot_type (Host.Boot with that mode and, for
// rescue, the public key lines of ssh_key_ids; rescue_server is shown while
// boot_type is rescue). Stop: "stopping" -> "stopped"; start: "starting" ->
// "ready". Delete: "deleting" (Host.PowerOff), then the server is gone
// (Host.Delete) and GET answers the recorded untyped 404 {"message":"Not
// Found"}. Host calls of one server run in order, outside the lock.
//
// # Faithful to the recordings (test/fixtures/scaleway/baremetal-api-recordings.json)
//
//   - Offers (hourly, monthly; unknown_subscription_period lists hourly), OS
//     and options are the recorded answers verbatim (catalog.json); the offer
//     stock field follows the simulated stock.
//   - Server JSON has the recorded keys; ips appear at delivery with
//     reverse/domain <id>.<zone>.baremetal.scw.cloud; times are RFC 3339 UTC
//     with microseconds; enums are the API's strings.
//   - 400 {"message":"Server is not delivered"} on reboot/start/stop while
//     ordered/delivering; untyped 404 {"message":"Not Found"} after delete;
//     the v3 empty list {"server_private_networks":[],"total_count":0}.
//
// # Approximated (no recording available)
//
//   - Typed errors are not in the recordings: their bodies are the shapes the
//     SDK decodes (scw/errors.go) with the messages of Scaleway's standard
//     errors (as in the SDK's own end-to-end tests), and the status codes
//     Scaleway uses for them: not_found 404 (IDs never seen), transient_state
//     409, quotas_exceeded 403 (resource = the offer's quota_name),
//     out_of_stock 412, invalid_arguments 400, permissions_denied 403,
//     precondition_failed 412, denied_authentication 401 (missing or wrong
//     X-Auth-Token), locked 403.
//   - Messages of refusals not recorded: "Server is stopped" (reboot while
//     stopped), "Server is already stopped/started", "Server is protected",
//     409 conflicts for an option or private network already present, and
//     precondition_failed when attaching a private network without the
//     Private Network option.
//   - Offer IDs outside fr-par-2 are derived from (zone, recorded ID); the
//     stock is shared by the hourly and monthly offer of one name, seeded from
//     the hourly offer's recorded stock.
//   - VLAN IDs are per (server, private network), 1000-3999; the rescue
//     password is random; IPv6 is 2001:bc8:1201:<zone>:<EUI-64 of the
//     uplink MAC>, gateway fe80::1; IAM fingerprints are "<bits>
//     SHA256:<hash> <comment> (<type>)"; 429 bodies are
//     {"message":...,"type":"too_many_requests"}.
package scwsim
