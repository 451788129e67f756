package scaleway

import (
	"fmt"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/envvar"
)

// EnvVars documents what ConfigFromEnv reads.
var EnvVars = []envvar.Var{
	{Name: EnvAccessKey, Secret: true, Usage: "[REQUIRED] Access key of the Scaleway API key (SCW + 17 characters)."},
	{Name: EnvSecretKey, Secret: true, Usage: "[REQUIRED] Secret key of the Scaleway API key (a UUID)."},
	{Name: EnvProjectID, Usage: "[REQUIRED] Project the controller orders, lists and tags servers in and registers its rescue SSH key in (a UUID); NodeClasses naming another project are not Ready."},
	{Name: EnvOrganizationID, Usage: "Organization of the API key (a UUID); optional."},
	{Name: EnvDefaultZone, Default: string(DefaultZone), Usage: "Zone of NodeClasses that name none."},
	{Name: EnvAPIURL, Default: DefaultAPIURL, Usage: "Scaleway API endpoint (a proxy, or the simulator in tests); no trailing slash, no credentials."},
	{Name: EnvRateLimit, Default: fmt.Sprint(DefaultRateLimit), Usage: "Requests per second the whole process sends to the Scaleway API (Scaleway throttles per organization)."},
	{Name: EnvRateBurst, Default: fmt.Sprint(DefaultRateBurst), Usage: "Requests that may go out at once above the rate."},
	{Name: EnvMaxAttempts, Default: fmt.Sprint(DefaultMaxAttempts), Usage: "Attempts per API call, the first included, for transient failures (5xx, 429, timeouts); 1 disables retries."},
	{Name: EnvRequestTimeout, Default: DefaultRequestTimeout.String(), Usage: "Timeout of one API attempt (every page of a list together)."},
	{Name: EnvPollInterval, Default: DefaultPollInterval.String(), Usage: "Interval of the batched server polling (one ListServers per zone for every install waiting)."},
	{Name: EnvThrottleWait, Default: DefaultThrottleWait.String(), Usage: "How long one call may keep waiting out 429 answers (bare 429s and Retry-After) before it fails."},
	{Name: EnvSettleWait, Default: DefaultSettleWait.String(), Usage: "How long to wait for what the API is still settling (a ready server's IPv4, private network options) before giving up."},
	{Name: EnvOrderSettle, Default: DefaultOrderSettle.String(), Usage: "How long an order whose answer was lost (any failure after sending but a 4xx refusal: timeout, 5xx, reset, undecodable answer) is looked for in the listings before the claim may order again; listings lag behind orders."},
}
