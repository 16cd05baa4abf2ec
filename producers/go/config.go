package bernstein

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Config is everything an Emitter needs, read from the environment (the same settings as the
// Python and TypeScript SDKs: docs/producing.md, "Kafka and S3 settings").
type Config struct {
	KafkaBootstrap  string            // BERNSTEIN_KAFKA_BOOTSTRAP (host:port[,host:port])
	KafkaConfigFile string            // BERNSTEIN_KAFKA_CONFIG_FILE (librdkafka-style properties)
	KafkaSecurity   map[string]string // the file's checked settings (paths made absolute)
	TopicPrefix     string            // BERNSTEIN_TOPIC_PREFIX (default "bernstein")
	S3Endpoint      string            // BERNSTEIN_S3_ENDPOINT (http://host:port or https://...)
	S3AccessKey     string            // BERNSTEIN_S3_ACCESS_KEY
	S3SecretKey     string            // BERNSTEIN_S3_SECRET_KEY
	S3Bucket        string            // BERNSTEIN_S3_BUCKET (default "bernstein-cas")
	ProducerKeysDir string            // BERNSTEIN_PRODUCER_KEYS_DIR (see DefaultProducerKeysDir)
}

// SubmissionsTopic is <prefix>.activity.submissions.
func (c *Config) SubmissionsTopic() string { return c.TopicPrefix + ".activity.submissions" }

// ConfigFromEnv reads and checks the settings; a missing bootstrap or S3 endpoint, or an unusable
// properties file, is a ConfigError naming the setting.
func ConfigFromEnv() (*Config, error) {
	c := &Config{
		KafkaBootstrap:  os.Getenv("BERNSTEIN_KAFKA_BOOTSTRAP"),
		KafkaConfigFile: os.Getenv("BERNSTEIN_KAFKA_CONFIG_FILE"),
		TopicPrefix:     envOr("BERNSTEIN_TOPIC_PREFIX", "bernstein"),
		S3Endpoint:      os.Getenv("BERNSTEIN_S3_ENDPOINT"),
		S3AccessKey:     envOr("BERNSTEIN_S3_ACCESS_KEY", "bernstein"),
		S3SecretKey:     envOr("BERNSTEIN_S3_SECRET_KEY", "bernstein-secret-key"),
		S3Bucket:        envOr("BERNSTEIN_S3_BUCKET", "bernstein-cas"),
		ProducerKeysDir: DefaultProducerKeysDir(),
	}
	if c.KafkaBootstrap == "" {
		return nil, &ConfigError{Msg: "no Kafka bootstrap: set BERNSTEIN_KAFKA_BOOTSTRAP (host:port)"}
	}
	if c.S3Endpoint == "" {
		return nil, &ConfigError{Msg: "no S3 endpoint: set BERNSTEIN_S3_ENDPOINT (http://host:port)"}
	}
	if !strings.HasPrefix(c.S3Endpoint, "http://") && !strings.HasPrefix(c.S3Endpoint, "https://") {
		return nil, &ConfigError{Msg: fmt.Sprintf("BERNSTEIN_S3_ENDPOINT=%q must start with http:// or https://", c.S3Endpoint)}
	}
	if !IsValidTopicPrefix(c.TopicPrefix) {
		return nil, &ConfigError{Msg: fmt.Sprintf("BERNSTEIN_TOPIC_PREFIX=%q is not a valid topic prefix (letters, digits, . _ -)", c.TopicPrefix)}
	}
	if c.KafkaConfigFile != "" {
		security, err := LoadClientProperties(c.KafkaConfigFile)
		if err != nil {
			return nil, err
		}
		c.KafkaSecurity = security
	}
	return c, nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// IsValidTopicPrefix: 1-200 of A-Z a-z 0-9 . _ -.
func IsValidTopicPrefix(p string) bool {
	if p == "" || len(p) > 200 {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// The settings a client properties file may hold: the Python SDK's allow-list
// (substrate/kafka.py SECURITY_KEYS); anything else is refused there, so it is refused here.
var securityKeys = []string{
	"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
	"ssl.endpoint.identification.algorithm",
}

// LoadClientProperties reads a librdkafka-style client properties file (key=value lines, # or !
// comments). Relative ssl.*.location paths are taken relative to the file's directory. Errors name
// the file, the line and the key, never a value (it may be a password).
func LoadClientProperties(path string) (map[string]string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("cannot read the Kafka client properties file %s (BERNSTEIN_KAFKA_CONFIG_FILE): %v", path, err)}
	}
	abs, _ := filepath.Abs(path)
	return ParseClientProperties(string(text), path, filepath.Dir(abs))
}

// ParseClientProperties checks a properties text (see LoadClientProperties); base is the directory
// relative paths are resolved against ("" keeps them).
func ParseClientProperties(text, source, base string) (map[string]string, error) {
	values := map[string]string{}
	for number, raw := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		key, value, found := strings.Cut(line, "=")
		if !found {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s:%d: expected key=value", source, number+1)}
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !slices.Contains(securityKeys, key) {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s:%d: unknown key %q; a Kafka client properties file may set only %s", source, number+1, key, strings.Join(sortedKeys(), ", "))}
		}
		if _, dup := values[key]; dup {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s:%d: %s is set twice", source, number+1, key)}
		}
		if value == "" {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s:%d: %s has no value", source, number+1, key)}
		}
		values[key] = value
	}
	if _, a := values["sasl.mechanism"]; a {
		if _, b := values["sasl.mechanisms"]; b {
			return nil, &ConfigError{Msg: source + ": set sasl.mechanism or sasl.mechanisms, not both"}
		}
	}
	if m, ok := values["sasl.mechanisms"]; ok {
		delete(values, "sasl.mechanisms")
		values["sasl.mechanism"] = m
	}
	choices := map[string][]string{
		"security.protocol": {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"},
		"sasl.mechanism":    {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"},
	}
	for key, allowed := range choices {
		if v, ok := values[key]; ok {
			v = strings.ToUpper(v)
			if !slices.Contains(allowed, v) {
				return nil, &ConfigError{Msg: fmt.Sprintf("%s: %s must be one of %s", source, key, strings.Join(allowed, ", "))}
			}
			values[key] = v
		}
	}
	if v, ok := values["ssl.endpoint.identification.algorithm"]; ok {
		v = strings.ToLower(v)
		if v != "https" && v != "none" {
			return nil, &ConfigError{Msg: source + ": ssl.endpoint.identification.algorithm must be one of https, none"}
		}
		values["ssl.endpoint.identification.algorithm"] = v
	}
	protocol := values["security.protocol"]
	if protocol == "" {
		protocol = "PLAINTEXT"
		values["security.protocol"] = protocol
	}
	sasl := strings.HasPrefix(protocol, "SASL_")
	if sasl && values["sasl.username"] != "" && values["sasl.password"] == "" {
		return nil, &ConfigError{Msg: source + ": sasl.username is set but sasl.password is not"}
	}
	for key := range values {
		if !sasl && strings.HasPrefix(key, "sasl.") {
			return nil, &ConfigError{Msg: source + ": sasl.* settings need security.protocol SASL_SSL or SASL_PLAINTEXT"}
		}
	}
	// What librdkafka (the Python SDK) supports but this SDK does not: refused, never ignored.
	if m := values["sasl.mechanism"]; m == "GSSAPI" || m == "OAUTHBEARER" {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s: sasl.mechanism %s is not supported by the Go SDK (use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", source, m)}
	}
	if _, ok := values["ssl.key.password"]; ok {
		return nil, &ConfigError{Msg: source + ": ssl.key.password (an encrypted client key) is not supported by the Go SDK: use an unencrypted PEM key file readable only by the producer"}
	}
	if sasl && values["sasl.mechanism"] == "" {
		values["sasl.mechanism"] = "PLAIN" // librdkafka's default
	}
	if base != "" {
		for _, key := range []string{"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"} {
			if v, ok := values[key]; ok && !filepath.IsAbs(v) {
				values[key] = filepath.Join(base, v)
			}
		}
	}
	return values, nil
}

func sortedKeys() []string {
	keys := append([]string{}, securityKeys...)
	slices.Sort(keys)
	return keys
}
