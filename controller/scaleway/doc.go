// Package scaleway is the provider's layer over scaleway-sdk-go (v1.39.0):
// Elastic Metal servers (baremetal v1), their Private Networks (baremetal v3)
// and the controller's SSH key (IAM). Everything else in the controller talks
// to Scaleway through a *Client, never through the SDK directly.
//
// # What it adds to the SDK
//
// The SDK sends one HTTP request per call and stops there: no retries, no
// rate limiting, a fixed 30s client timeout, and errors that are typed only
// when the API sends a "type" (the EM API often answers just
// {"message": "..."}). A Client adds:
//
//   - Retries with exponential backoff and full jitter (wait uniform in
//     [0, min(MaxBackoff, BaseBackoff*2^n))) for 5xx, network errors and
//     per-attempt timeouts, bounded by Retry.MaxAttempts and the caller's
//     context deadline. 429s (recorded bare: no body, no Retry-After) do not
//     count against MaxAttempts; they are retried (waits capped at
//     ThrottleBackoffCap) until Retry.ThrottleWait of waiting is spent. A
//     Retry-After header (seconds or HTTP-date, on 429 and 503) is honoured as
//     a floor, capped at Retry.MaxRetryAfter. 4xx business errors are never
//     retried, nor is a 503 whose message refuses the request itself
//     (recorded: "cloud-init is not supported on this offer"; ClassRefused).
//   - Error answers the SDK cannot decode (non-JSON bodies under a JSON
//     Content-Type) become an *HTTPError classified by their status; a
//     success (2xx) whose body it cannot decode becomes an
//     *UndecodableError (server_error). Any other failure of the HTTP
//     exchange (an HTTP/2 RST_STREAM or GOAWAY, a broken connection) is
//     network.
//   - Non-idempotent calls (CreateServer, RebootServer, StartServer,
//     StopServer, AddServerOption, AttachPrivateNetwork, CreateSSHKey) are
//     retried only when the failure proves the API did not act: nothing was
//     sent (the client-side rate limit, a refused connection, a dial error)
//     or it was throttled (429). Only that, or a refusal by the API (a 4xx
//     other than 408 and 429), means "not applied": any other failure once
//     the request left (a timeout, a 5xx, also a 503 whose words refuse, a
//     reset connection or stream, a GOAWAY, a 2xx whose body cannot be
//     decoded, the caller's context ending) leaves the error with IsAmbiguous
//     true, whatever its class (mayHaveApplied). CreateServer then records
//     the order as in flight, AddServerOption, AttachPrivateNetwork and
//     EnsureSSHKey read state back, and a reboot is not sent again. Tag
//     updates and deletes are retried (the same request again changes
//     nothing more), and their final error is ambiguous by the same rule.
//   - CreateServer is idempotent by a tag (the NodeClaim tag): it lists
//     servers carrying the tag before ordering and after any ambiguous
//     failure, and never orders when that lookup fails. An order whose
//     answer was lost stays in flight (ErrOrderInFlight) until its server
//     shows in the listings, which lag, or Config.OrderSettle passes; a 2xx
//     that names no server counts as lost too. The simulator loses answers
//     in every shape (scwsim.AfterCommitKinds); lost_test.go orders once
//     through each of them.
//   - Classification: Classify(err) -> Class (the metric's result label), and
//     IsNotFound (typed not_found and the untyped 404 {"message":"Not Found"}
//     the API answers once a server is deleted), IsOutOfStock, IsQuotaExceeded,
//     IsTransientState (incl. the untyped 400 "Server is not delivered"),
//     IsPermissionDenied, IsUnauthorized, IsRefused, IsOrderRefused,
//     IsPrecondition, IsRetryable, IsAmbiguous. docs/troubleshooting.md has
//     the table of answer shapes and what the provider does with each.
//   - Addresses: IPv4Of reads a server's IPv4; Poller.WaitIPv4 and
//     Poller.IPv4 wait (bounded by Config.SettleWait) while a ready server
//     lists none, as the API shows for a while after some deliveries, and end
//     with a *NoAddressError that is no reason to release the server.
//   - AttachPrivateNetworks: the Private Network option, then each network,
//     retrying a 412 while the option is enabling (the real API accepts the
//     attach then already), bounded by Config.SettleWait.
//   - One client-side token bucket (golang.org/x/time/rate) shared by every
//     HTTP request of the process (each page of a list costs a token).
//   - A per-attempt timeout (Config.RequestTimeout) covering all pages.
//   - Every attempt logged at V(1) (op, zone, id, result, attempt, duration)
//     and counted; retries logged at V(0). The secret key never appears in
//     logs, errors or Config's String/GoString (Config.Validate runs before
//     the SDK's own validation, which would quote it).
//   - Batched polling: a Poller serves WaitFor/Get from one paginated
//     ListServers per zone and interval (filtered by the cluster's managed-by
//     tag), shared by all waiters, so API calls per round do not grow with
//     the number of servers being built. A server missing from the list costs
//     one GetServer (gone -> IsNotFound, or just not listed yet). A wait
//     ends after maxPollFailures failed lists in a row, with the API's error.
//     A wait Expecting a delivery or reboot lists sparsely early and densely
//     near the end its offer and zone usually take (Cadence, cadence.go).
//
// # Metrics
//
//	karpenter_scaleway_em_api_calls_total{op,result}      attempts by outcome
//	karpenter_scaleway_em_api_call_duration_seconds{op}   attempt latency
//	karpenter_scaleway_em_api_retries_total{op,reason}    retries by failure class
//	karpenter_scaleway_em_api_poller_waiters{zone}        callers blocked in the Poller
//	karpenter_scaleway_em_api_poller_lists_total{zone}    batched list rounds
//
// result is one of ok, not_found, out_of_stock, quota, transient, throttled,
// server_error, refused, timeout, permission, unauthorized, invalid, network,
// canceled, other. op is one of the Op* constants.
//
// # Usage
//
//	cfg, err := scaleway.ConfigFromEnv(os.Getenv) // SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID,
//	                                     // SCW_DEFAULT_ORGANIZATION_ID, SCW_DEFAULT_ZONE, SCW_API_URL
//	c, err := scaleway.New(cfg, scaleway.WithLogger(log), scaleway.WithRegisterer(crmetrics.Registry))
//	claim := scaleway.Tag(scaleway.TagNodeClaim, nodeClaim.Name)
//	srv, created, err := c.CreateServer(ctx, scaleway.CreateServerRequest{
//		Zone: zone, OfferID: offerID, Name: nodeClaim.Name,
//		Tags: append(scaleway.FormatTags(tags), claim), IdempotencyTag: claim,
//	})
//	if scaleway.IsOutOfStock(err) || scaleway.IsQuotaExceeded(err) { /* InsufficientCapacityError */ }
//	poller := c.NewPoller(scaleway.Tag(scaleway.TagManagedBy, clusterName)) // one per process
//	srv, err = poller.WaitFor(ctx, zone, srv.ID, scaleway.StatusIs(baremetal.ServerStatusReady))
//	_, err = c.SetTag(ctx, zone, srv.ID, scaleway.TagPhase, "rescue")
//	keyID, err := c.EnsureSSHKey(ctx, "karpenter-scaleway-em-"+clusterName, authorizedKeyLine)
//	_, err = c.RebootServer(ctx, zone, srv.ID, baremetal.ServerBootTypeRescue, []string{keyID})
//
// Optional tuning variables: KARPENTER_SCALEWAY_EM_API_RATE_LIMIT (req/s),
// _RATE_BURST, _MAX_ATTEMPTS, _REQUEST_TIMEOUT, _POLL_INTERVAL,
// _THROTTLE_WAIT, _SETTLE_WAIT.
//
// # Tags
//
// Scaleway tags are strings; the provider uses "key=value" (Tag, FormatTags,
// ParseTags, TagValue, HasTags, SetTagIn, RemoveTagIn). UpdateServerTags
// replaces the whole list; SetTag/RemoveTag/EditTags do a read-modify-write
// that is serialised per server inside the process but can race with
// writers in other processes (the API has no compare-and-swap), so each key
// should have one owner. The read is the server as a read, list or write of
// this client returned it within four poll intervals (seen.go), else a
// GetServer.
//
// # Tests
//
//	go test -count=1 -race ./controller/scaleway/...
//
// They drive the real SDK against the EM API simulator (test/sim/scwsim) and
// against httptest servers replaying the recorded error bodies of
// test/fixtures/scaleway/baremetal-api-recordings.json.
package scaleway
