package gateway

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Credentials: an NKey user seed file, or a JWT .creds file (operator/JWT deployments). Both are read at every
// (re)connect, so a rotated Secret is picked up without a restart.
type Credentials struct {
	NKeySeedFile string
	CredsFile    string
}

var seedRE = regexp.MustCompile(`^SU[A-Z2-7]{56}$`)

// ConnectionOptions for a gateway: servers is nats://gateway@host:4222 (comma-separated for a cluster) — the user
// names the reply inbox prefix _INBOX_gateway, the only one deploy/nats/auth.conf lets the gateway receive acks on. The
// credential: creds, else ?nkey_seed_file= / ?creds_file= on the URL, else NATS_NKEY_SEED_FILE / NATS_CREDS_FILE.
// A password in the URL works against a development server of your own only (deploy/nats/auth.conf accepts none).
// Reconnects forever, 1 s apart plus up to 1 s of jitter, also when NATS is down at start; notices a dead server
// within ~10 s. The error is a configuration error (a missing or placeholder seed), named here, at start.
func ConnectionOptions(servers string, creds Credentials, name string) (string, []nats.Option, error) {
	var user, pass string
	hasPass := false
	var list []string
	for _, entry := range strings.Split(servers, ",") {
		s := strings.TrimSpace(entry)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return "", nil, fmt.Errorf("NATS URL %q: %w", entry, err)
		}
		q := u.Query()
		if creds.NKeySeedFile == "" && creds.CredsFile == "" {
			creds.NKeySeedFile, creds.CredsFile = q.Get("nkey_seed_file"), q.Get("creds_file")
		}
		if u.User != nil {
			user = u.User.Username()
			pass, hasPass = u.User.Password()
		}
		list = append(list, u.Scheme+"://"+u.Host)
	}
	if creds.NKeySeedFile == "" && creds.CredsFile == "" {
		creds.CredsFile = os.Getenv("NATS_CREDS_FILE")
		if creds.CredsFile == "" {
			creds.NKeySeedFile = os.Getenv("NATS_NKEY_SEED_FILE")
		}
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(time.Second, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.Timeout(2 * time.Second),
		// No client-side reconnect buffer: while disconnected a publish fails at once and the emitter keeps the
		// newest request per model itself (bounded, coalesced) instead of every byte.
		nats.ReconnectBufSize(-1),
	}
	if user != "" {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+user))
	}
	switch {
	case creds.CredsFile != "":
		opts = append(opts, nats.UserCredentials(creds.CredsFile))
	case creds.NKeySeedFile != "":
		b, err := os.ReadFile(creds.NKeySeedFile)
		if err != nil {
			return "", nil, fmt.Errorf("NKey seed file: %w", err)
		}
		if !seedRE.MatchString(strings.TrimSpace(string(b))) {
			return "", nil, fmt.Errorf("NKey seed file %s holds no user seed (SU..., 58 characters)", creds.NKeySeedFile)
		}
		opt, err := nats.NkeyOptionFromSeed(creds.NKeySeedFile)
		if err != nil {
			return "", nil, fmt.Errorf("NKey seed file %s: %w", creds.NKeySeedFile, err)
		}
		opts = append(opts, opt)
	case user != "" && hasPass:
		opts = append(opts, nats.UserInfo(user, pass))
	}
	return strings.Join(list, ","), opts, nil
}
