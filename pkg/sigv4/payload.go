package sigv4

import (
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"
)

// Payload is how a request's body is covered by its signature.
type Payload int

// Payload modes (seed 004, "SigV4 re-signing").
const (
	// SignBody: the body is read whole and its SHA-256 signed.
	SignBody Payload = iota
	// Unsigned: headers only, x-amz-content-sha256 UNSIGNED-PAYLOAD;
	// the body streams.
	Unsigned
	// StreamingUnsignedTrailer: headers only, the aws-chunked body (with
	// a trailing checksum) streams as it is.
	StreamingUnsignedTrailer
)

func (p Payload) String() string {
	switch p {
	case SignBody:
		return "signed body"
	case Unsigned:
		return UnsignedPayload
	}
	return StreamingUnsignedPayloadTrailer
}

// Errors of DetectPayload.
var (
	// ErrChunkSigned: a STREAMING-AWS4-* or other chunk-signed payload,
	// whose per-chunk signatures a re-signer cannot reproduce.
	ErrChunkSigned = errors.New("chunk-signed streaming payload")
	// ErrContentSHA256: an x-amz-content-sha256 that is none of the
	// known forms.
	ErrContentSHA256 = errors.New("x-amz-content-sha256 is neither a SHA-256 nor a known payload mode")
)

// DetectPayload reads the client's x-amz-content-sha256 (contentSHA256,
// "" when absent): a hex SHA-256 signs the body; UNSIGNED-PAYLOAD and
// STREAMING-UNSIGNED-PAYLOAD-TRAILER sign headers only; any other
// STREAMING-* is chunk-signed (ErrChunkSigned). Absent: the body is
// signed when its length is known (sized, or none: hasBody false),
// else the payload is unsigned.
func DetectPayload(contentSHA256 string, hasBody, sized bool) (Payload, error) {
	v := strings.TrimSpace(contentSHA256)
	switch {
	case v == "":
		if !hasBody || sized {
			return SignBody, nil
		}
		return Unsigned, nil
	case v == UnsignedPayload:
		return Unsigned, nil
	case v == StreamingUnsignedPayloadTrailer:
		return StreamingUnsignedTrailer, nil
	case strings.HasPrefix(v, "STREAMING-"):
		return 0, ErrChunkSigned
	case isHexSHA256(v):
		return SignBody, nil
	}
	return 0, ErrContentSHA256
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// regionRE is an AWS region: us-east-1, eu-central-2, us-gov-west-1,
// cn-north-1, us-isob-east-1, ...
var regionRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)?-[a-z]+-[0-9]+$`)
})

// awsSuffixes are the DNS suffixes of AWS's endpoints.
var awsSuffixes = []string{".amazonaws.com", ".amazonaws.com.cn", ".api.aws"}

// RegionFromHost returns the region an AWS endpoint's host name names:
// the label nearest the AWS suffix that is a region (bedrock-runtime.
// us-east-1.amazonaws.com, bucket.s3.dualstack.eu-west-1.amazonaws.com,
// s3-fips.us-gov-west-1.amazonaws.com, the legacy s3-us-west-2 form, a
// VPC endpoint's ...us-east-1.vpce.amazonaws.com). ok is false for a
// host outside AWS's domains or without a region (global endpoints:
// s3.amazonaws.com, sts.amazonaws.com).
func RegionFromHost(host string) (string, bool) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if hp, _, err := net.SplitHostPort(h); err == nil {
		h = hp
	}
	var rest string
	for _, s := range awsSuffixes {
		if strings.HasSuffix(h, s) {
			rest = strings.TrimSuffix(h, s)
			break
		}
	}
	if rest == "" {
		return "", false
	}
	labels := strings.Split(rest, ".")
	for i := len(labels) - 1; i >= 0; i-- {
		l := labels[i]
		if regionRE().MatchString(l) {
			return l, true
		}
		if r, ok := strings.CutPrefix(l, "s3-"); ok && regionRE().MatchString(r) {
			return r, true
		}
	}
	return "", false
}
