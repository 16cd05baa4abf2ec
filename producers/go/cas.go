package bernstein

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// BlobStore is the content-addressed store in an S3 bucket: every blob lives under
// sha256/<first two hex>/<64 hex> of its own bytes (substrate/cas.py).
type BlobStore struct {
	client *minio.Client
	bucket string
	where  string
}

// BlobKey is the object key of a digest: "sha256/<aa>/<hex>".
func BlobKey(digest string) (string, error) {
	if !IsDigest(digest) {
		return "", &MalformedDigestError{Field: "blob digest", Value: digest}
	}
	hexPart := digest[len(digestPrefix):]
	return "sha256/" + hexPart[:2] + "/" + hexPart, nil
}

// NewBlobStore connects to the bucket of cfg (no request is made until the first operation).
func NewBlobStore(cfg *Config) (*BlobStore, error) {
	secure := strings.HasPrefix(cfg.S3Endpoint, "https://")
	host := strings.TrimRight(strings.SplitN(cfg.S3Endpoint, "://", 2)[1], "/")
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: 60 * time.Second,
		MaxIdleConnsPerHost:   8,
	}
	client, err := minio.New(host, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.S3AccessKey, cfg.S3SecretKey, ""),
		Secure:     secure,
		Region:     "us-east-1",
		Transport:  transport,
		MaxRetries: 2,
		// checksums travel as trailing headers (minio-go's only way to send one): S3 and MinIO support them
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, &ConfigError{Msg: "BERNSTEIN_S3_ENDPOINT: " + err.Error()}
	}
	return &BlobStore{client: client, bucket: cfg.S3Bucket, where: "s3 bucket " + cfg.S3Bucket + " at " + cfg.S3Endpoint}, nil
}

// Stat reports whether the blob of digest is stored, and its size.
func (s *BlobStore) Stat(ctx context.Context, digest string) (size int64, stored bool, err error) {
	key, err := BlobKey(digest)
	if err != nil {
		return 0, false, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			if minio.ToErrorResponse(err).Code == "NoSuchBucket" {
				return 0, false, &StoreError{Op: "look up blob " + digest + " in " + s.where + " (no such bucket)", Err: err}
			}
			return 0, false, nil
		}
		return 0, false, &StoreError{Op: "look up blob " + digest + " in " + s.where, Err: err}
	}
	return info.Size, true, nil
}

// Holds reports whether the newest version at digest's address provably holds its bytes: the store
// computed and checked its SHA-256 checksum at upload, and that checksum is the address's. An object
// without it (or with another) may be someone else's bytes placed there first.
func (s *BlobStore) Holds(ctx context.Context, digest string) (bool, error) {
	key, err := BlobKey(digest)
	if err != nil {
		return false, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			if minio.ToErrorResponse(err).Code == "NoSuchBucket" {
				return false, &StoreError{Op: "look up blob " + digest + " in " + s.where + " (no such bucket)", Err: err}
			}
			return false, nil
		}
		return false, &StoreError{Op: "look up blob " + digest + " in " + s.where, Err: err}
	}
	return info.ChecksumSHA256 != "" && info.ChecksumSHA256 == ChecksumSHA256(digest), nil
}

// ChecksumSHA256 is the x-amz-checksum-sha256 of the bytes whose address is digest (base64 of the raw SHA-256).
func ChecksumSHA256(digest string) string {
	raw, err := hex.DecodeString(strings.TrimPrefix(digest, digestPrefix))
	if err != nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// Put stores data under its digest with an x-amz-checksum-sha256 the store checks (so it refuses
// other bytes), skipping the upload only when the object there provably holds these bytes (Holds).
// It returns the digest.
func (s *BlobStore) Put(ctx context.Context, data []byte) (string, error) {
	digest := SHA256Digest(data)
	if held, err := s.Holds(ctx, digest); err != nil {
		return "", err
	} else if held {
		return digest, nil
	}
	key, _ := BlobKey(digest)
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{
			ContentType: "application/octet-stream",
			// the client computes the SHA-256 checksum and the store checks the body against it
			Checksum: minio.ChecksumSHA256,
			// one PUT for any blob (at most 64 MiB): its stored checksum is the whole object's, i.e. the address
			PartSize: 128 << 20,
		})
	if err != nil {
		return "", &StoreError{Op: "store blob " + digest + " in " + s.where, Err: err}
	}
	return digest, nil
}
