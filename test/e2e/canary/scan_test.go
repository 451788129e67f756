package canary

import (
	"strings"
	"testing"
)

func TestScanFindsEachEncodingAndNothingElse(t *testing.T) {
	secret := Secret{"S3 secret key", "0123456789abcdef/+=0123"}
	clean := Artefact{"controller log", []byte(`{"msg":"imaging","url":"https://s3.example/img.raw.zst"}`)}
	for enc, line := range map[string]string{
		"raw":         `{"msg":"x","key":"0123456789abcdef/+=0123"}`,
		"base64":      `data: MDEyMzQ1Njc4OWFiY2RlZi8rPTAxMjM=`,
		"hex":         `30313233343536373839616263646566` + `2f2b3d30313233`,
		"url-escaped": `GET /x?k=0123456789abcdef%2F%2B%3D0123`,
	} {
		hits, err := Scan([]Secret{secret}, []Artefact{clean, {"events", []byte(line)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 || hits[0].Artefact != "events" || hits[0].Encoding != enc || hits[0].Secret != secret.Name {
			t.Errorf("%s: hits %v", enc, hits)
		}
		if len(hits) == 1 && strings.Contains(hits[0].String(), secret.Value) {
			t.Errorf("%s: the hit quotes the secret: %s", enc, hits[0])
		}
	}
	if _, err := Scan([]Secret{{"short", "abc"}}, []Artefact{clean}); err == nil {
		t.Error("a secret shorter than MinLen was accepted")
	}
}
