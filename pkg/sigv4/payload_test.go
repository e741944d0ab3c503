package sigv4

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestDetectPayload(t *testing.T) {
	for _, tc := range []struct {
		header         string
		hasBody, sized bool
		want           Payload
		err            error
	}{
		{"", false, false, SignBody, nil},
		{"", true, true, SignBody, nil},
		{"", true, false, Unsigned, nil},
		{EmptySHA256, true, true, SignBody, nil},
		{"UNSIGNED-PAYLOAD", true, false, Unsigned, nil},
		{"STREAMING-UNSIGNED-PAYLOAD-TRAILER", true, false, StreamingUnsignedTrailer, nil},
		{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", true, true, 0, ErrChunkSigned},
		{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", true, false, 0, ErrChunkSigned},
		{"STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", true, true, 0, ErrChunkSigned},
		{"not-a-hash", true, true, 0, ErrContentSHA256},
		{EmptySHA256[:63], true, true, 0, ErrContentSHA256},
	} {
		got, err := DetectPayload(tc.header, tc.hasBody, tc.sized)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%q body %v sized %v: %v %v, want %v %v", tc.header, tc.hasBody, tc.sized, got, err, tc.want, tc.err)
		}
	}
}

func TestRegionFromHost(t *testing.T) {
	for host, want := range map[string]string{
		"bedrock-runtime.us-east-1.amazonaws.com":          "us-east-1",
		"bucket.s3.eu-west-1.amazonaws.com":                "eu-west-1",
		"bucket.s3.dualstack.ap-southeast-2.amazonaws.com": "ap-southeast-2",
		"s3-fips.us-gov-west-1.amazonaws.com":              "us-gov-west-1",
		"bucket.s3-us-west-2.amazonaws.com":                "us-west-2",
		"s3.cn-north-1.amazonaws.com.cn":                   "cn-north-1",
		"sts.us-isob-east-1.amazonaws.com":                 "us-isob-east-1",
		"vpce-0a1b.s3.us-east-2.vpce.amazonaws.com":        "us-east-2",
		"dynamodb.eu-central-1.api.aws":                    "eu-central-1",
		"bedrock-runtime.us-east-1.amazonaws.com:443":      "us-east-1",
		"s3.amazonaws.com":                                 "",
		"sts.amazonaws.com":                                "",
		"s3.us-east-1.example.com":                         "",
		"amazonaws.com":                                    "",
		"evil-us-east-1.com":                               "",
	} {
		got, ok := RegionFromHost(host)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", host, got, ok, want)
		}
	}
}

// BenchmarkSign is the cost of re-signing one S3 request (the proxy pays
// it per request on a credential_signing endpoint, besides hashing a
// signed body).
func BenchmarkSign(b *testing.B) {
	h := http.Header{}
	h.Set("X-Amz-Date", "20261201T102030Z")
	h.Set("X-Amz-Content-Sha256", UnsignedPayload)
	h.Set("X-Amz-Security-Token", "FwoGZXIvYXdzEXAMPLEtoken")
	h.Set("Content-Type", "application/octet-stream")
	r := &Request{Method: "PUT", Host: "bucket.s3.us-east-1.amazonaws.com", Path: "/dir/a%20key.txt", Query: "x-id=PutObject",
		Header: h, Signed: []string{"x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "content-type"}, PayloadHash: UnsignedPayload}
	c := Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
	o := ForService("s3", "us-east-1", time.Date(2026, 12, 1, 10, 20, 30, 0, time.UTC))
	b.ReportAllocs()
	for b.Loop() {
		Sign(r, c, o)
	}
}
