package imagesource

import (
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/envvar"
)

// EnvVars documents what ConfigFromEnv reads.
var EnvVars = []envvar.Var{
	{Name: EnvEndpoint, Usage: "S3 endpoint the controller reads image manifests from, e.g. http://garage.garage.svc:3900; empty: NodeClasses must use an http(s) manifestURL."},
	{Name: EnvRegion, Default: DefaultRegion, Usage: "S3 region of the bucket (Garage's is garage unless configured)."},
	{Name: EnvBucket, Usage: "Bucket of NodeClasses that name none (spec.image.bucket)."},
	{Name: EnvAccessKey, Secret: true, Usage: "Key ID of a read key for the bucket; empty: anonymous reads (then S3_PUBLIC must be true)."},
	{Name: EnvSecretKey, Secret: true, Usage: "Secret of that key."},
	{Name: EnvSessionToken, Secret: true, Usage: "Session token, for temporary credentials only."},
	{Name: EnvPublic, Default: "false", Usage: "true: the objects are anonymously readable; servers get plain URLs instead of presigned ones, and no key is needed."},
	{Name: EnvPublicURL, Usage: "Base of plain URLs when S3_PUBLIC is true ({bucket} is replaced), e.g. Garage's web endpoint; default <S3_ENDPOINT>/<bucket>."},
	{Name: EnvPresignEndpoint, Usage: "Endpoint written into presigned URLs when the servers' rescue system cannot reach S3_ENDPOINT (a cluster-internal Service); default S3_ENDPOINT."},
	{Name: EnvURLExpiry, Default: DefaultURLExpiry.String(), Usage: "Lifetime of presigned image URLs: must cover a whole download (em-imager resumes on the same URL); at most 7 days."},
	{Name: EnvCacheTTL, Default: DefaultCacheTTL.String(), Usage: "How long a manifest read from the bucket is reused before it is read again."},
	{Name: EnvCABundle, Usage: "PEM file of CA certificates trusted besides the system's, for a self-signed S3 endpoint or https manifest URL (chart value imageBucket.caBundle)."},
}
