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
// Control it at runtime: SetStock, SetQuota, Inject (5xx, 429, timeouts,
// delays, answers lost after the API acted, servers stuck in a state or
// going to error), ForceStatus, SetHost;
// Options.RateLimit throttles like a real key and Options.Jitter spreads
// phase durations. Inspect it with Calls (method, path, query, status, time,
// duration, fault, server, create tags), CountCalls, CreatesByTag (duplicate
// orders per NodeClaim), CallsForServer, Servers, Server, History,
// PrivateNetworks, Stock.
//
// Where the real API varies, or no recording shows it, one named switch per
// behaviour (variants.go) selects it; the zero value is the most realistic:
// ReadyIPs (deliveries that reach "ready" without IPs), PrivateNetworkAttach
// (attach while the option is enabling), RateLimited (bare 429s) and
// Unrecorded (the shape of out-of-stock, quota, precondition and transient
// answers, and how fast a reboot shows).
//
// An answer is lost after the API acted in every shape a real network loses
// it (AfterCommitKinds): a gateway's 504 (FaultAnswerLost), a reset
// connection, or a reset stream over HTTP/2 (FaultResetAfterCommit), no
// answer before the client's timeout (FaultTimeoutAfterCommit), and a 2xx
// whose body the SDK cannot decode (FaultUndecodableAfterCommit). Start
// serves HTTP/1.1 and unencrypted HTTP/2, so a client whose transport speaks
// HTTP/2 sees the HTTP/2 shapes.
//
// Reads may lag behind writes (stale.go; all off by default): ListLag hides
// a new server from listings; StaleLag makes listings serve every server as
// it was that long ago (tag edits, status changes and deletions show late,
// a deleted server stays listed), and StaleReadsByID makes GetServer lag
// the same way. Nothing Scaleway publishes promises a current read, so
// these are the unkind side of what the real API may do.
//
// Run its tests: go test -count=1 -race ./test/sim/scwsim/...
//
// # State machine
//
// CreateServer (install: null) answers "delivering" ("ordered" first when
// Delays.Order > 0 or an install is given), then "ready" after
// Delays.Delivery, and Host.Boot(normal) is called. Reboot answers
// "stopping" (Host.PowerOff), then "starting", then "ready" with the
// requested boot_type (Host.Boot with that mode and, for rescue, the public
// key lines of ssh_key_ids; rescue_server is shown while boot_type is
// rescue). Stop: "stopping" -> "stopped"; start: "starting" -> "ready".
// Delete: "deleting" (Host.PowerOff), then the server is gone (Host.Delete)
// and GET answers the recorded untyped 404 {"message":"Not Found"}. Host
// calls of one server run in order, outside the lock.
//
// # Faithful to the recordings (test/fixtures/scaleway/baremetal-api-recordings.json)
//
// replay_test.go replays every recorded scenario of the fixtures against the
// simulator (status codes, key sets, enum values, messages).
//
//   - Offers (hourly, monthly; unknown_subscription_period lists hourly), OS
//     and options are the recorded answers verbatim (catalog.json); the offer
//     stock field follows the simulated stock. An offer has the same ID in
//     every zone and GET by that ID answers in any zone; zones sell different
//     offers: fr-par-2 and fr-par-1 serve their recorded listings.
//   - Server JSON has the recorded keys; times are RFC 3339 UTC with
//     microseconds; enums are the API's strings.
//   - IPs: an order seen "ordered" lists its IPs from the next read (no
//     reverse, domain ""); a delivery from "delivering" lists none until
//     "ready", and some reach "ready" with ips: [] (Options.ReadyIPs).
//     After "ready", reverse_status "unknown", domain "" and ping
//     "ping_status_unknown" settle (Delays.Settle) to "active", the domain
//     <id>.<zone>.baremetal.scw.cloud and "ping_status_up".
//   - A stopped server's ping status stays "ping_status_up".
//   - Attaching a private network is accepted while the Private Network
//     option is still "option_status_enabling".
//   - Deleting a server: the answer shows the options as they were, then
//     they read "option_status_disabling" and attachments "detaching" until
//     the server is gone.
//   - 400 {"message":"Server is not delivered"} on reboot/start/stop while
//     ordered/delivering; untyped 404 {"message":"Not Found"} after delete;
//     the v3 empty list {"server_private_networks":[],"total_count":0}; 503
//     {"message":"cloud-init is not supported on this offer"} for user_data
//     on an offer without the cloud-init tag (a refusal answered 503).
//   - Throttled requests: 429 with no body, no Content-Type, no Retry-After,
//     only X-Envoy-Ratelimited: true (Options.RateLimited).
//
// # Approximated (no recording available)
//
//   - Typed errors the provider branches on are not in the recordings: their
//     bodies are the shapes the SDK decodes (scw/errors.go) with the messages
//     of Scaleway's standard errors, and the status codes Scaleway uses for
//     them: out_of_stock 412, quotas_exceeded 403 (resource = the offer's
//     quota_name), precondition_failed 412, transient_state 409. Options.
//     Unrecorded reshapes them (message only, empty, text). Also guessed:
//     not_found 404 for IDs never seen, invalid_arguments 400,
//     denied_authentication 401 (missing or wrong X-Auth-Token), locked 403.
//   - A rescue reboot behaves like a normal one (Options.Unrecorded varies
//     how fast the API shows it).
//   - Messages of refusals not recorded: "Server is stopped" (reboot while
//     stopped), "Server is already stopped/started", "Server is protected",
//     409 conflicts for an option or private network already present, and
//     precondition_failed when attaching a private network without the
//     Private Network option.
//   - Zones other than fr-par-1 and fr-par-2 serve fr-par-2's offers of the
//     commercial ranges catalog/snapshot assumes for them; fr-par-1's monthly
//     offers are the recorded monthly offers its hourly ones name. The stock
//     is shared by the hourly and monthly offer of one name, seeded from the
//     hourly offer's recorded stock. How long a delivery stays without IPs
//     (Delays.IPsAfterReady) is a guess.
//   - VLAN IDs are per (server, private network), 1000-3999; the rescue
//     password is random; IPv6 is 2001:bc8:1201:<zone>:<EUI-64 of the
//     uplink MAC>, gateway fe80::1; IAM fingerprints are "<bits>
//     SHA256:<hash> <comment> (<type>)"; JSON 429 bodies (RateLimitedJSON)
//     are {"message":...,"type":"too_many_requests"}.
package scwsim
