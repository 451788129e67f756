// Package source downloads an image over HTTP(S) (or reads file:// and local
// paths) as one io.ReadCloser that survives broken connections:
//
//	r, err := source.Open(ctx, url, source.Options{StallTimeout: 30 * time.Second})
//	defer r.Close()
//	io.Copy(dst, r) // r.Resumes(), r.Offset(), r.Size() for the report
//
// An interrupted body is resumed with a Range request from the last byte
// received; If-Range plus an ETag/Last-Modified comparison ensures two
// versions of an object are never spliced (ErrChanged). Connect, header,
// stall and overall timeouts apply; 408, 429 and 5xx are retried with
// exponential backoff (honouring Retry-After), other 4xx are final
// (ErrRejected). Redirects are followed. Errors never carry the URL's query
// string, which holds the credentials of presigned URLs (see RedactURL).
package source
