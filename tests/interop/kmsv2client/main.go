// Command kmsv2client drives a running sceau with the kube-apiserver's own
// KMS v2 client code, imported from k8s.io/apiserver:
//
//   - pkg/storage/value/encrypt/envelope/kmsv2: NewGRPCService (the gRPC
//     client), GenerateTransformer (Encrypt of a 32-byte seed, validated with
//     the apiserver's rules) and NewEnvelopeTransformer (the storage
//     transformer that calls Decrypt on a cache miss);
//   - pkg/server/options/encryptionconfig: LoadEncryptionConfig, which builds
//     the apiserver's KMS v2 probe (Status, key_id validation, DEK rotation)
//     and returns its "kms-providers" health check and the transformers for
//     each configured resource.
//
// It prints one line per check, "PASS name (detail)" or "FAIL name: why", and
// "N passed, M failed" last; it exits 1 if any check failed.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2"
	kmstypes "k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2"
	"k8s.io/klog/v2"
	kmsservice "k8s.io/kms/pkg/service"
)

const apiServerID = "sceau-interop"

var sceauKeyID = regexp.MustCompile(`^sceau-[0-9]+\.[0-9]+-[0-9a-f]{16}$`)

// counted wraps the apiserver's gRPC service and counts the calls that
// returned from sceau, so a check can tell that a Decrypt really went out.
type counted struct {
	kmsservice.Service
	status, encrypt, decrypt atomic.Int64
	decryptNanos             sync.Mutex
	decryptLatencies         []time.Duration
}

func (c *counted) Status(ctx context.Context) (*kmsservice.StatusResponse, error) {
	c.status.Add(1)
	return c.Service.Status(ctx)
}

func (c *counted) Encrypt(ctx context.Context, uid string, data []byte) (*kmsservice.EncryptResponse, error) {
	c.encrypt.Add(1)
	return c.Service.Encrypt(ctx, uid, data)
}

func (c *counted) Decrypt(ctx context.Context, uid string, req *kmsservice.DecryptRequest) ([]byte, error) {
	c.decrypt.Add(1)
	start := time.Now()
	out, err := c.Service.Decrypt(ctx, uid, req)
	if err == nil {
		c.decryptNanos.Lock()
		c.decryptLatencies = append(c.decryptLatencies, time.Since(start))
		c.decryptNanos.Unlock()
	}
	return out, err
}

// logSink receives the apiserver code's klog output (at -v=4), so that the
// expected errors of the refusal checks do not clutter the report; warnings
// and errors logged during a failed check are printed under it. It also
// counts the gRPC client's dials, which NewGRPCService logs at V(4).
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	dials int
}

const dialMessage = "Successfully dialed Unix socket"

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.dials += bytes.Count(p, []byte(dialMessage))
	return len(p), nil
}

// take returns the warning and error lines logged since the last take.
func (l *logSink) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.HasPrefix(line, "E") || strings.HasPrefix(line, "W") {
			out = append(out, line)
		}
	}
	l.buf.Reset()
	return out
}

func (l *logSink) dialCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dials
}

var sink = &logSink{}

func init() {
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	fs.Set("logtostderr", "false")
	fs.Set("stderrthreshold", "FATAL")
	fs.Set("one_output", "true")
	fs.Set("v", "4")
	klog.SetOutput(sink)
}

type runner struct {
	passed, failed int
}

func (r *runner) check(name string, fn func() (string, error)) bool {
	sink.take()
	detail, err := fn()
	logged := sink.take()
	if err != nil {
		r.failed++
		fmt.Printf("FAIL %s: %v\n", name, err)
		for _, line := range logged {
			fmt.Printf("    apiserver log: %s\n", line)
		}
		return false
	}
	r.passed++
	if detail != "" {
		fmt.Printf("PASS %s (%s)\n", name, detail)
	} else {
		fmt.Printf("PASS %s\n", name)
	}
	return true
}

// fail records a check that could not run because an earlier one failed.
func (r *runner) skipFail(name, why string) {
	r.failed++
	fmt.Printf("FAIL %s: not run, %s\n", name, why)
}

// grpcCode names the gRPC code and message sceau sent, found through the
// apiserver's error wrapping.
func grpcCode(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return fmt.Sprintf("%s %q", se.GRPCStatus().Code(), se.GRPCStatus().Message())
	}
	return "no gRPC status: " + err.Error()
}

type config struct {
	socket      string
	name        string
	timeout     time.Duration
	concurrency int
	iterations  int
	idle        time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.socket, "socket", "", "path of sceau's unix socket (required)")
	flag.StringVar(&cfg.name, "name", "sceau", "KMS provider name, part of the k8s:enc:kms:v2:<name>: prefix")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Second, "per-call timeout (the apiserver's default kms.timeout is 3s)")
	flag.IntVar(&cfg.concurrency, "concurrency", 1, "goroutines doing Encrypt + write/read round trips at once")
	flag.IntVar(&cfg.iterations, "iterations", 4, "round trips per goroutine, each read through a fresh transformer")
	flag.DurationVar(&cfg.idle, "idle", 21*time.Second,
		"silence before the reconnect checks: longer than sceau's 10 s idle close and the probe's 20 s healthy TTL (0 skips them)")
	flag.Parse()
	if cfg.socket == "" || cfg.concurrency < 1 || cfg.iterations < 1 {
		fmt.Fprintln(os.Stderr, "usage: kmsv2client --socket PATH [--concurrency N] [--iterations N] [--idle DUR]")
		os.Exit(2)
	}
	abs, err := filepath.Abs(cfg.socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.socket = abs

	r := &runner{}
	run(r, cfg)
	fmt.Printf("%d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		os.Exit(1)
	}
}

func run(r *runner, cfg config) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	endpoint := "unix://" + cfg.socket
	prefix := "k8s:enc:kms:v2:" + cfg.name + ":"

	// --- the gRPC client, as kube-apiserver builds it ---------------------
	var svc *counted
	if !r.check("grpc-service", func() (string, error) {
		s, err := kmsv2.NewGRPCService(ctx, endpoint, cfg.name, cfg.timeout)
		if err != nil {
			return "", fmt.Errorf("kmsv2.NewGRPCService(%q): %w", endpoint, err)
		}
		svc = &counted{Service: s}
		return "kmsv2.NewGRPCService " + endpoint, nil
	}) {
		r.skipFail("everything else", "no gRPC service")
		return
	}

	var statusKeyID string
	r.check("status", func() (string, error) {
		st, err := svc.Status(ctx)
		if err != nil {
			return "", fmt.Errorf("Status: %s", grpcCode(err))
		}
		var errs []string
		if st.Version != kmsv2.KMSAPIVersionv2 {
			errs = append(errs, fmt.Sprintf("version %q, want %q", st.Version, kmsv2.KMSAPIVersionv2))
		}
		if st.Healthz != "ok" {
			errs = append(errs, fmt.Sprintf("healthz %q, want \"ok\"", st.Healthz))
		}
		if _, err := kmsv2.ValidateKeyID(st.KeyID); err != nil {
			errs = append(errs, "kmsv2.ValidateKeyID: "+err.Error())
		}
		if !sceauKeyID.MatchString(st.KeyID) {
			errs = append(errs, fmt.Sprintf("key_id %q is not sceau-<16 hex>", st.KeyID))
		}
		if len(errs) > 0 {
			return "", errors.New(strings.Join(errs, "; "))
		}
		statusKeyID = st.KeyID
		return fmt.Sprintf("version=%s healthz=%s key_id=%s", st.Version, st.Healthz, st.KeyID), nil
	})

	// --- Encrypt, through the apiserver's DEK-seed generation -------------
	var state kmsv2.State
	haveState := r.check("generate-transformer", func() (string, error) {
		var objs [2]*kmstypes.EncryptedObject
		for i := range objs {
			uid := string(uuid.NewUUID())
			tr, obj, cacheKey, err := kmsv2.GenerateTransformer(ctx, uid, svc, true)
			if err != nil {
				return "", fmt.Errorf("kmsv2.GenerateTransformer: %w", err)
			}
			objs[i] = obj
			if i == 0 {
				state = newState(tr, obj, cacheKey, uid, cfg.name)
			}
		}
		o := objs[0]
		switch {
		case statusKeyID != "" && o.KeyID != statusKeyID:
			// The apiserver discards such a DEK and reports the provider unhealthy.
			return "", fmt.Errorf("Encrypt key_id %q differs from Status key_id %q", o.KeyID, statusKeyID)
		case o.EncryptedDEKSourceType != kmstypes.EncryptedDEKSourceType_HKDF_SHA256_XNONCE_AES_GCM_SEED:
			return "", fmt.Errorf("source type %v, want HKDF_SHA256_XNONCE_AES_GCM_SEED", o.EncryptedDEKSourceType)
		case len(o.Annotations) != 0:
			return "", fmt.Errorf("sceau returned %d annotations, it documents none", len(o.Annotations))
		case bytes.Equal(objs[0].EncryptedDEKSource, objs[1].EncryptedDEKSource):
			return "", errors.New("two Encrypts of distinct seeds returned the same ciphertext")
		}
		return fmt.Sprintf("32-byte seed sealed to a %d-byte ciphertext, key_id matches Status, no annotations, 2 Encrypts distinct",
			len(o.EncryptedDEKSource)), nil
	})

	stateFunc := func() (kmsv2.State, error) { return state, nil }
	// newTransformer builds what the apiserver builds for one KMS v2 provider:
	// the envelope transformer behind its k8s:enc:kms:v2:<name>: prefix. Each
	// call has an empty DEK cache, so its first read must Decrypt.
	newTransformer := func(s kmsservice.Service, sf kmsv2.StateFunc) value.Transformer {
		return value.NewPrefixTransformers(nil, value.PrefixTransformer{
			Prefix:      []byte(prefix),
			Transformer: kmsv2.NewEnvelopeTransformer(s, cfg.name, sf, apiServerID),
		})
	}

	// --- write with one transformer, read with a fresh one ----------------
	var stored []byte
	storageKey := value.DefaultContext("/registry/secrets/default/interop")
	if !haveState {
		r.skipFail("envelope-round-trip", "no DEK seed")
	} else {
		r.check("envelope-round-trip", func() (string, error) {
			plaintext := []byte("interop secret " + string(uuid.NewUUID()))
			out, err := newTransformer(svc, stateFunc).TransformToStorage(ctx, plaintext, storageKey)
			if err != nil {
				return "", fmt.Errorf("TransformToStorage: %w", err)
			}
			if !bytes.HasPrefix(out, []byte(prefix)) {
				return "", fmt.Errorf("stored value starts %q, want %q", out[:min(len(out), len(prefix))], prefix)
			}
			if bytes.Contains(out, plaintext) {
				return "", errors.New("stored value contains the plaintext")
			}
			stored = out
			before := svc.decrypt.Load()
			got, stale, err := newTransformer(svc, stateFunc).TransformFromStorage(ctx, out, storageKey)
			if err != nil {
				return "", fmt.Errorf("TransformFromStorage: %w", err)
			}
			if n := svc.decrypt.Load() - before; n != 1 {
				return "", fmt.Errorf("read made %d Decrypt calls, want 1", n)
			}
			if !bytes.Equal(got, plaintext) {
				return "", errors.New("read back different bytes")
			}
			if stale {
				return "", errors.New("read reported stale although key_id matches the write state")
			}
			return fmt.Sprintf("%d-byte stored value under %s, fresh transformer's read made 1 Decrypt", len(out), prefix), nil
		})
	}

	// --- what sceau must refuse, as the apiserver would ask it ------------
	negative := func(name string, mutate func(*kmstypes.EncryptedObject)) {
		if stored == nil {
			r.skipFail(name, "no stored value")
			return
		}
		r.check(name, func() (string, error) {
			obj := &kmstypes.EncryptedObject{}
			if err := proto.Unmarshal(stored[len(prefix):], obj); err != nil {
				return "", fmt.Errorf("stored value is not an EncryptedObject: %w", err)
			}
			mutate(obj)
			if err := kmsv2.ValidateEncryptedObject(obj); err != nil {
				return "", fmt.Errorf("mutated object fails the apiserver's own validation, test is wrong: %w", err)
			}
			raw, err := proto.Marshal(obj)
			if err != nil {
				return "", err
			}
			before := svc.decrypt.Load()
			got, _, err := newTransformer(svc, stateFunc).TransformFromStorage(ctx, append([]byte(prefix), raw...), storageKey)
			if err == nil {
				return "", fmt.Errorf("read succeeded (%d bytes); sceau unsealed a DEK it should refuse", len(got))
			}
			if n := svc.decrypt.Load() - before; n != 1 {
				return "", fmt.Errorf("read made %d Decrypt calls, want 1: %v", n, err)
			}
			return "Decrypt refused: " + grpcCode(err), nil
		})
	}
	negative("decrypt-refuses-other-key-id", func(o *kmstypes.EncryptedObject) {
		o.KeyID = "sceau-0000000000000000"
		if o.KeyID == statusKeyID {
			o.KeyID = "sceau-ffffffffffffffff"
		}
	})
	negative("decrypt-refuses-tampered-ciphertext", func(o *kmstypes.EncryptedObject) {
		c := bytes.Clone(o.EncryptedDEKSource)
		c[len(c)-8] ^= 0x01 // inside the sealed private area
		o.EncryptedDEKSource = c
	})
	negative("decrypt-refuses-annotations", func(o *kmstypes.EncryptedObject) {
		o.Annotations = map[string][]byte{"version.encryption.remote.io": []byte("1")}
	})

	// --- the apiserver's own probe and health check -----------------------
	// encryptionconfig keeps its KMS v2 probe unexported; LoadEncryptionConfig
	// is the entry point kube-apiserver itself calls. Its exported service
	// factory hook lets us count the calls the probe makes.
	var factoryMu sync.Mutex
	var factoryServices []*counted
	encryptionconfig.EnvelopeKMSv2ServiceFactory = func(ctx context.Context, endpoint, providerName string, callTimeout time.Duration) (kmsservice.Service, error) {
		s, err := kmsv2.NewGRPCService(ctx, endpoint, providerName, callTimeout)
		if err != nil {
			return nil, err
		}
		c := &counted{Service: s}
		factoryMu.Lock()
		factoryServices = append(factoryServices, c)
		factoryMu.Unlock()
		return c, nil
	}
	dir, err := os.MkdirTemp("", "sceau-interop-")
	if err != nil {
		r.skipFail("encryptionconfig", err.Error())
		return
	}
	defer os.RemoveAll(dir)
	configPath := filepath.Join(dir, "encryption-config.yaml")
	configYAML := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms:
          apiVersion: v2
          name: %s
          endpoint: %s
          timeout: %s
      - identity: {}
`, cfg.name, endpoint, cfg.timeout)
	secrets := schema.GroupResource{Resource: "secrets"}

	type apiserver struct {
		cancel context.CancelFunc
		conf   *encryptionconfig.EncryptionConfiguration
		svc    *counted
	}
	// load is one apiserver start: parse, validate, build the transformers
	// and prime the probe (Status, then Encrypt of a fresh seed).
	load := func() (*apiserver, error) {
		actx, acancel := context.WithCancel(ctx)
		conf, err := encryptionconfig.LoadEncryptionConfig(actx, configPath, false, apiServerID)
		if err != nil {
			acancel()
			return nil, fmt.Errorf("encryptionconfig.LoadEncryptionConfig: %w", err)
		}
		factoryMu.Lock()
		s := factoryServices[len(factoryServices)-1]
		factoryMu.Unlock()
		return &apiserver{cancel: acancel, conf: conf, svc: s}, nil
	}
	readyz := func(conf *encryptionconfig.EncryptionConfiguration) error {
		req := httptest.NewRequest("GET", "/readyz/kms-providers", nil).WithContext(ctx)
		return conf.HealthChecks[0].Check(req)
	}

	var first *apiserver
	r.check("encryptionconfig-load", func() (string, error) {
		if err := os.WriteFile(configPath, []byte(configYAML), 0o600); err != nil {
			return "", err
		}
		a, err := load()
		if err != nil {
			return "", err
		}
		first = a
		var names []string
		for _, h := range a.conf.HealthChecks {
			names = append(names, h.Name())
		}
		if len(names) != 1 || names[0] != "kms-providers" {
			return "", fmt.Errorf("health checks %v, want [kms-providers]", names)
		}
		if a.conf.Transformers[secrets] == nil {
			return "", errors.New("no transformer for secrets")
		}
		st, en := a.svc.status.Load(), a.svc.encrypt.Load()
		if st < 1 || en != 1 {
			return "", fmt.Errorf("priming made %d Status and %d Encrypt calls, want >=1 and 1 (the probe's log follows)", st, en)
		}
		return fmt.Sprintf("health check %q; probe primed with %d Status + %d Encrypt", names[0], st, en), nil
	})

	if first == nil {
		r.skipFail("kms-providers-healthz", "no encryption config")
	} else {
		r.check("kms-providers-healthz", func() (string, error) {
			if err := readyz(first.conf); err != nil {
				return "", fmt.Errorf("%s: %w", first.conf.HealthChecks[0].Name(), err)
			}
			return "[+]kms-providers ok", nil
		})

		r.check("encryptionconfig-secrets-round-trip", func() (string, error) {
			plaintext := []byte("apiVersion: v1\nkind: Secret\ndata: " + string(uuid.NewUUID()))
			key := value.DefaultContext("/registry/secrets/default/interop-config")
			out, err := first.conf.Transformers[secrets].TransformToStorage(ctx, plaintext, key)
			if err != nil {
				return "", fmt.Errorf("secrets TransformToStorage: %w", err)
			}
			if !bytes.HasPrefix(out, []byte(prefix)) || bytes.Contains(out, plaintext) {
				return "", fmt.Errorf("stored value does not start with %q or contains the plaintext", prefix)
			}
			// A second apiserver (its own seed, empty cache) reads it.
			second, err := load()
			if err != nil {
				return "", err
			}
			defer second.cancel()
			before := second.svc.decrypt.Load()
			got, stale, err := second.conf.Transformers[secrets].TransformFromStorage(ctx, out, key)
			if err != nil {
				return "", fmt.Errorf("second apiserver's secrets TransformFromStorage: %w", err)
			}
			if !bytes.Equal(got, plaintext) {
				return "", errors.New("read back different bytes")
			}
			if n := second.svc.decrypt.Load() - before; n != 1 {
				return "", fmt.Errorf("read made %d Decrypt calls, want 1", n)
			}
			return fmt.Sprintf("written by one apiserver config, read by a second one via 1 Decrypt (stale=%v)", stale), nil
		})
	}

	// --- many round trips, concurrently -----------------------------------
	r.check(fmt.Sprintf("round-trips-x%d", cfg.concurrency), func() (string, error) {
		return roundTrips(ctx, svc, cfg, prefix, newTransformer)
	})

	// --- after a silence: sceau has closed the idle connection ------------
	if cfg.idle > 0 && first != nil {
		// Both clients' connections have been silent since their last call;
		// sceau closes a connection after 10 s of silence. A dial logged by
		// NewGRPCService's dialer during the check shows that the old
		// connection was gone and the client made a new one by itself.
		time.Sleep(cfg.idle)
		r.check("kms-providers-healthz-after-idle", func() (string, error) {
			st, en, dials := first.svc.status.Load(), first.svc.encrypt.Load(), sink.dialCount()
			if err := readyz(first.conf); err != nil {
				return "", fmt.Errorf("%s: %w", first.conf.HealthChecks[0].Name(), err)
			}
			dst, den, ddials := first.svc.status.Load()-st, first.svc.encrypt.Load()-en, sink.dialCount()-dials
			if dst != 1 || den != 0 {
				return "", fmt.Errorf("probe made %d Status and %d Encrypt calls, want 1 and 0 (key_id unchanged)", dst, den)
			}
			if ddials != 1 {
				return "", fmt.Errorf("the probe's Status made %d dials, want 1 (sceau should have closed the idle connection)", ddials)
			}
			return fmt.Sprintf("after %s idle: the probe's Status redialled once, key_id unchanged so no Encrypt", cfg.idle), nil
		})
		if stored != nil {
			r.check("decrypt-after-idle", func() (string, error) {
				dials := sink.dialCount()
				got, _, err := newTransformer(svc, stateFunc).TransformFromStorage(ctx, stored, storageKey)
				if err != nil {
					return "", fmt.Errorf("TransformFromStorage: %w", err)
				}
				if !bytes.HasPrefix(got, []byte("interop secret ")) {
					return "", errors.New("read back different bytes")
				}
				if d := sink.dialCount() - dials; d != 1 {
					return "", fmt.Errorf("the Decrypt made %d dials, want 1 (sceau should have closed the idle connection)", d)
				}
				return "the first client's Decrypt redialled once and succeeded", nil
			})
		}
	}

	r.check("status-key-id-stable", func() (string, error) {
		st, err := svc.Status(ctx)
		if err != nil {
			return "", fmt.Errorf("Status: %s", grpcCode(err))
		}
		if st.KeyID != statusKeyID || st.Healthz != "ok" {
			return "", fmt.Errorf("Status now healthz=%q key_id=%q, first key_id=%q", st.Healthz, st.KeyID, statusKeyID)
		}
		return fmt.Sprintf("%d Status, %d Encrypt, %d Decrypt on the first client", svc.status.Load(), svc.encrypt.Load(), svc.decrypt.Load()), nil
	})
	if first != nil {
		first.cancel()
	}
}

// roundTrips runs cfg.concurrency goroutines. Each is one "apiserver": it
// generates its own seed (Encrypt), then for cfg.iterations writes a value
// and reads it back through a fresh transformer (Decrypt). All share one
// gRPC client, as one apiserver's reads do.
func roundTrips(ctx context.Context, svc *counted, cfg config, prefix string,
	newTransformer func(kmsservice.Service, kmsv2.StateFunc) value.Transformer) (string, error) {
	enc0, dec0 := svc.encrypt.Load(), svc.decrypt.Load()
	svc.decryptNanos.Lock()
	svc.decryptLatencies = nil
	svc.decryptNanos.Unlock()

	errs := make(chan error, cfg.concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < cfg.concurrency; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			uid := string(uuid.NewUUID())
			tr, obj, cacheKey, err := kmsv2.GenerateTransformer(ctx, uid, svc, true)
			if err != nil {
				errs <- fmt.Errorf("goroutine %d: kmsv2.GenerateTransformer: %w", g, err)
				return
			}
			st := newState(tr, obj, cacheKey, uid, cfg.name)
			sf := func() (kmsv2.State, error) { return st, nil }
			writer := newTransformer(svc, sf)
			for i := 0; i < cfg.iterations; i++ {
				key := value.DefaultContext(fmt.Sprintf("/registry/secrets/ns%d/s%d", g, i))
				plaintext := []byte(fmt.Sprintf("goroutine %d value %d %s", g, i, uuid.NewUUID()))
				out, err := writer.TransformToStorage(ctx, plaintext, key)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d write %d: %w", g, i, err)
					return
				}
				got, _, err := newTransformer(svc, sf).TransformFromStorage(ctx, out, key)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d read %d: %w", g, i, err)
					return
				}
				if !bytes.Equal(got, plaintext) {
					errs <- fmt.Errorf("goroutine %d read %d: different bytes", g, i)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	var all []string
	for err := range errs {
		all = append(all, err.Error())
	}
	if len(all) > 0 {
		return "", fmt.Errorf("%d of %d goroutines failed: %s", len(all), cfg.concurrency, strings.Join(all, "; "))
	}
	elapsed := time.Since(start)
	enc, dec := svc.encrypt.Load()-enc0, svc.decrypt.Load()-dec0
	want := int64(cfg.concurrency * cfg.iterations)
	if enc != int64(cfg.concurrency) || dec != want {
		return "", fmt.Errorf("%d Encrypt and %d Decrypt calls, want %d and %d", enc, dec, cfg.concurrency, want)
	}
	svc.decryptNanos.Lock()
	lat := append([]time.Duration(nil), svc.decryptLatencies...)
	svc.decryptNanos.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return fmt.Sprintf("%d goroutine(s) x %d: %d Encrypt + %d Decrypt in %s; Decrypt latency median %s, max %s",
		cfg.concurrency, cfg.iterations, enc, dec, elapsed.Round(time.Millisecond),
		lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond)), nil
}

// newState is the write state the apiserver keeps after a successful
// GenerateTransformer: the transformer plus what gets stored with each value.
func newState(tr value.Transformer, obj *kmstypes.EncryptedObject, cacheKey []byte, uid, provider string) kmsv2.State {
	return kmsv2.State{
		Transformer:                           tr,
		EncryptedObjectKeyID:                  obj.KeyID,
		EncryptedObjectEncryptedDEKSource:     obj.EncryptedDEKSource,
		EncryptedObjectAnnotations:            obj.Annotations,
		EncryptedObjectEncryptedDEKSourceType: obj.EncryptedDEKSourceType,
		UID:                                   uid,
		ExpirationTimestamp:                   time.Now().Add(3 * time.Minute),
		CacheKey:                              cacheKey,
		KMSProviderName:                       provider,
	}
}
