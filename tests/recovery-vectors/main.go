// Command recovery-vectors writes the test fixtures of sceau's
// src/recovery/{etcd,kubernetes}.rs with the real upstream code, so that the
// Rust side is judged against what a kube-apiserver and an etcd really store:
//
//   - the kube-apiserver's KMS v2 envelope transformer (k8s.io/apiserver
//     v0.37.2, kmsv2.GenerateTransformer + kmsv2.NewEnvelopeTransformer behind
//     the "k8s:enc:kms:v2:<name>:" prefix transformer) encrypts v1 Secrets
//     serialized by apimachinery's protobuf (and JSON) serializer; a fake
//     in-process KMS v2 service stands in for sceau and records the plaintext
//     DEK source (seed or key) it is asked to wrap;
//   - an embedded etcd v3.7.0 (go.etcd.io/etcd/server/v3/embed, on loopback)
//     stores those values, with an overwrite and a delete, and
//     snapshot.SaveWithVersion (what `etcdctl snapshot save` calls) writes a
//     snapshot; a Get with a prefix is printed with encoding/json, which is
//     what `etcdctl get --prefix -w json` prints.
//
// Every stored value is read back through the apiserver's own read path
// (TransformFromStorage, the protobuf/JSON decoder) before it is written out.
//
//	cd tests/recovery-vectors && go run . -out ../fixtures/recovery
//
// Outputs: vectors.json (DEK sources, stored values, expected Secrets, the
// live etcd keys and revisions), snapshot.db, etcdctl-get.json.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2"
	kmstypes "k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2"
	kmsservice "k8s.io/kms/pkg/service"
)

const provider = "sceau"

// fakeKMS wraps nothing: its "ciphertext" is a label, and it remembers the
// plaintext it was given so that the fixtures can carry the DEK source that
// sceau's own envelope would have opened to.
type fakeKMS struct {
	mu    sync.Mutex
	plain map[string][]byte // ciphertext -> plaintext
}

func (f *fakeKMS) Encrypt(_ context.Context, _ string, data []byte) (*kmsservice.EncryptResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sum := sha256.Sum256(data)
	ct := []byte("fake-kms-ciphertext-" + hex.EncodeToString(sum[:8]))
	f.plain[string(ct)] = bytes.Clone(data)
	return &kmsservice.EncryptResponse{
		Ciphertext:  ct,
		KeyID:       "recovery-vectors-key",
		Annotations: map[string][]byte{"vectors.sceau.io": []byte("fake")},
	}, nil
}

func (f *fakeKMS) Decrypt(_ context.Context, _ string, req *kmsservice.DecryptRequest) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.plain[string(req.Ciphertext)]
	if !ok {
		return nil, fmt.Errorf("unknown ciphertext %q", req.Ciphertext)
	}
	return bytes.Clone(p), nil
}

func (f *fakeKMS) Status(context.Context) (*kmsservice.StatusResponse, error) {
	return &kmsservice.StatusResponse{Version: "v2", Healthz: "ok", KeyID: "recovery-vectors-key"}, nil
}

// envelope builds the transformer the apiserver stacks for a KMS v2 provider
// (encryptionconfig.kmsPrefixTransformer): GenerateTransformer makes the DEK
// source and asks the KMS to wrap it, the envelope transformer writes the
// EncryptedObject, and the prefix transformer adds "k8s:enc:kms:v2:<name>:".
func envelope(svc *fakeKMS, useSeed bool) (value.Transformer, []byte) {
	ctx := context.Background()
	transformer, obj, cacheKey, err := kmsv2.GenerateTransformer(ctx, "uid", svc, useSeed)
	check(err)
	state := kmsv2.State{
		Transformer:                           transformer,
		EncryptedObjectKeyID:                  obj.KeyID,
		EncryptedObjectEncryptedDEKSource:     obj.EncryptedDEKSource,
		EncryptedObjectAnnotations:            obj.Annotations,
		EncryptedObjectEncryptedDEKSourceType: obj.EncryptedDEKSourceType,
		UID:                                   "uid",
		ExpirationTimestamp:                   time.Now().Add(time.Hour),
		CacheKey:                              cacheKey,
		KMSProviderName:                       provider,
	}
	env := kmsv2.NewEnvelopeTransformer(svc, provider, func() (kmsv2.State, error) { return state, nil }, "vectors")
	prefixed := value.NewPrefixTransformers(nil, value.PrefixTransformer{
		Prefix:      []byte("k8s:enc:kms:v2:" + provider + ":"),
		Transformer: env,
	})
	dekSource, err := svc.Decrypt(ctx, "uid", &kmsservice.DecryptRequest{Ciphertext: obj.EncryptedDEKSource})
	check(err)
	return prefixed, dekSource
}

// expectedSecret is what the Rust side must decode; data values are base64
// (encoding/json's []byte).
type expectedSecret struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Immutable   bool              `json:"immutable"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Data        map[string][]byte `json:"data"`
}

type vectorObject struct {
	EtcdKey       string          `json:"etcd_key"`
	Stored        []byte          `json:"stored"`
	DEKSourceType int32           `json:"dek_source_type"`
	MediaType     string          `json:"media_type"`
	Plaintext     []byte          `json:"plaintext"`
	Expect        *expectedSecret `json:"expect"`
}

type liveKey struct {
	Key            string `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
	ValueSHA256    string `json:"value_sha256"`
}

type vectors struct {
	Comment  string         `json:"comment"`
	Provider string         `json:"provider"`
	Seed     []byte         `json:"seed"`
	AESKey   []byte         `json:"aes_gcm_key"`
	Objects  []vectorObject `json:"objects"`
	// Live is every key a reader of snapshot.db must report (sorted by key),
	// Deleted every key it must not.
	Live    []liveKey `json:"live"`
	Deleted []string  `json:"deleted"`
}

type codecs struct {
	protobuf runtime.Encoder
	json     runtime.Encoder
	decoder  runtime.Decoder
}

func newCodecs() codecs {
	scheme := runtime.NewScheme()
	check(corev1.AddToScheme(scheme))
	factory := serializer.NewCodecFactory(scheme)
	info := func(mediaType string) runtime.Serializer {
		i, ok := runtime.SerializerInfoForMediaType(factory.SupportedMediaTypes(), mediaType)
		if !ok {
			panic("no serializer for " + mediaType)
		}
		return i.Serializer
	}
	return codecs{
		protobuf: factory.EncoderForVersion(info(runtime.ContentTypeProtobuf), corev1.SchemeGroupVersion),
		json:     factory.EncoderForVersion(info(runtime.ContentTypeJSON), corev1.SchemeGroupVersion),
		decoder:  factory.UniversalDeserializer(),
	}
}

func secret(ns, name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	sum := sha256.Sum256([]byte(ns + "/" + name))
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         ns,
			Name:              name,
			UID:               types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		},
		Type: typ,
		Data: data,
	}
}

func expectOf(s *corev1.Secret) *expectedSecret {
	return &expectedSecret{
		Namespace: s.Namespace, Name: s.Name, Type: string(s.Type),
		Immutable: s.Immutable != nil && *s.Immutable, UID: string(s.UID),
		Labels: s.Labels, Annotations: s.Annotations, Data: s.Data,
	}
}

type generator struct {
	codecs codecs
	seedT  value.Transformer
	keyT   value.Transformer
	out    vectors
}

// encrypt serializes obj, encrypts it at etcdKey, reads it back through the
// apiserver's read path and records the vector.
func (g *generator) encrypt(etcdKey string, s *corev1.Secret, useSeed, asJSON bool) []byte {
	ctx := context.Background()
	enc, media, typ := g.codecs.protobuf, runtime.ContentTypeProtobuf, kmstypes.EncryptedDEKSourceType_HKDF_SHA256_XNONCE_AES_GCM_SEED
	if asJSON {
		enc, media = g.codecs.json, runtime.ContentTypeJSON
	}
	t := g.seedT
	if !useSeed {
		t, typ = g.keyT, kmstypes.EncryptedDEKSourceType_AES_GCM_KEY
	}
	plain, err := runtime.Encode(enc, s)
	check(err)
	// The etcd3 store authenticates every value with its etcd key
	// (storage/etcd3/store.go: authenticatedDataString(preparedKey)).
	stored, err := t.TransformToStorage(ctx, plain, value.DefaultContext(etcdKey))
	check(err)
	back, _, err := t.TransformFromStorage(ctx, stored, value.DefaultContext(etcdKey))
	check(err)
	if !bytes.Equal(back, plain) {
		panic("round trip mismatch at " + etcdKey)
	}
	decoded, _, err := g.codecs.decoder.Decode(back, nil, nil)
	check(err)
	if decoded.(*corev1.Secret).Name != s.Name {
		panic("decoded the wrong object at " + etcdKey)
	}
	g.out.Objects = append(g.out.Objects, vectorObject{
		EtcdKey: etcdKey, Stored: stored, DEKSourceType: int32(typ), MediaType: media,
		Plaintext: plain, Expect: expectOf(s),
	})
	return stored
}

func main() {
	outDir := flag.String("out", "../fixtures/recovery", "output directory")
	fillers := flag.Int("fillers", 40, "extra small Secrets, so that etcd's key bucket spans several bbolt pages")
	flag.Parse()
	check(os.MkdirAll(*outDir, 0o755))

	svc := &fakeKMS{plain: map[string][]byte{}}
	g := &generator{codecs: newCodecs()}
	var seed, key []byte
	g.seedT, seed = envelope(svc, true)
	g.keyT, key = envelope(svc, false)
	g.out = vectors{
		Comment:  "written by tests/recovery-vectors (k8s.io/apiserver v0.37.2, etcd v3.7.0); do not edit",
		Provider: provider, Seed: seed, AESKey: key,
	}

	etcd, endpoint, cleanup := startEtcd()
	defer cleanup()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	check(err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(k string, v []byte) {
		_, err := cli.Put(ctx, k, string(v))
		check(err)
	}

	immutable := true
	alpha := secret("default", "alpha", corev1.SecretTypeOpaque, map[string][]byte{
		"password": []byte("first version"),
	})
	put("/registry/secrets/default/alpha", g.encrypt("/registry/secrets/default/alpha", alpha, true, false))
	g.out.Objects = g.out.Objects[:0] // the overwritten version is not a vector
	alpha.Data = map[string][]byte{"password": []byte("hunter2"), "user": []byte("admin"), "binary": {0, 1, 2, 0xfe, 0xff}}
	alpha.Labels = map[string]string{"app": "demo", "tier": "db"}
	alpha.Annotations = map[string]string{"note": "quote \" backslash \\ newline \n tab \t unicode é ✓"}
	put("/registry/secrets/default/alpha", g.encrypt("/registry/secrets/default/alpha", alpha, true, false))

	gone := secret("kube-system", "gone", corev1.SecretTypeOpaque, map[string][]byte{"x": []byte("deleted")})
	put("/registry/secrets/kube-system/gone", g.encrypt("/registry/secrets/kube-system/gone", gone, true, false))
	g.out.Objects = g.out.Objects[:len(g.out.Objects)-1]
	_, err = cli.Delete(ctx, "/registry/secrets/kube-system/gone")
	check(err)
	g.out.Deleted = append(g.out.Deleted, "/registry/secrets/kube-system/gone")

	big := secret("prod", "big", corev1.SecretTypeTLS, map[string][]byte{
		"tls.crt": bytes.Repeat([]byte("0123456789abcdef"), 320), // 5 kB: more than a 4 KiB bbolt page
		"tls.key": []byte("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"),
	})
	big.Immutable = &immutable
	put("/registry/secrets/prod/big", g.encrypt("/registry/secrets/prod/big", big, true, false))

	legacy := secret("legacy", "old-key", corev1.SecretTypeBasicAuth, map[string][]byte{
		"username": []byte("root"), "password": []byte("AES_GCM_KEY"),
	})
	put("/registry/secrets/legacy/old-key", g.encrypt("/registry/secrets/legacy/old-key", legacy, false, false))

	asJSON := secret("default", "json-stored", corev1.SecretTypeOpaque, map[string][]byte{"k": []byte("v")})
	put("/registry/secrets/default/json-stored", g.encrypt("/registry/secrets/default/json-stored", asJSON, true, true))

	empty := secret("default", "empty", corev1.SecretTypeOpaque, nil)
	put("/registry/secrets/default/empty", g.encrypt("/registry/secrets/default/empty", empty, true, false))

	for i := 0; i < *fillers; i++ {
		name := fmt.Sprintf("filler-%02d", i)
		s := secret("filler", name, corev1.SecretTypeOpaque, map[string][]byte{"n": []byte(fmt.Sprint(i))})
		put("/registry/secrets/filler/"+name, g.encrypt("/registry/secrets/filler/"+name, s, true, false))
	}

	// Not encrypted: the recovery tools must pass over these.
	put("/registry/configmaps/default/plain", []byte("k8s\x00not an encrypted value"))
	put("/other/not-kubernetes", []byte("plain"))

	resp, err := cli.Get(ctx, "/", clientv3.WithPrefix())
	check(err)
	for _, kv := range resp.Kvs {
		sum := sha256.Sum256(kv.Value)
		g.out.Live = append(g.out.Live, liveKey{
			Key: string(kv.Key), CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, ValueSHA256: hex.EncodeToString(sum[:]),
		})
	}
	sort.Slice(g.out.Live, func(i, j int) bool { return g.out.Live[i].Key < g.out.Live[j].Key })

	// What `etcdctl get --prefix /registry/secrets -w json` prints
	// (etcdctl/ctlv3/command/printer_json.go: json.Marshal of the response).
	secrets, err := cli.Get(ctx, "/registry/secrets", clientv3.WithPrefix())
	check(err)
	printed, err := json.Marshal(secrets)
	check(err)
	check(os.WriteFile(filepath.Join(*outDir, "etcdctl-get.json"), append(printed, '\n'), 0o644))

	// What `etcdctl snapshot save` does (etcdctl/ctlv3/command/snapshot_command.go).
	snapPath := filepath.Join(*outDir, "snapshot.db")
	_, err = snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second}, snapPath)
	check(err)
	check(os.Chmod(snapPath, 0o644))
	_ = etcd

	text, err := json.MarshalIndent(g.out, "", " ")
	check(err)
	check(os.WriteFile(filepath.Join(*outDir, "vectors.json"), append(text, '\n'), 0o644))
	fmt.Printf("wrote %d vectors, %d live keys, snapshot %s\n", len(g.out.Objects), len(g.out.Live), snapPath)
}

// startEtcd runs a single-member etcd in a temporary directory on two free
// loopback ports.
func startEtcd() (*embed.Etcd, string, func()) {
	dir, err := os.MkdirTemp("", "recovery-vectors-etcd")
	check(err)
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "fatal" // Close logs its closed listeners at "error"
	client, peer := freeURL(), freeURL()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	check(err)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		panic("etcd did not become ready")
	}
	return e, client.String(), func() {
		e.Close()
		_ = os.RemoveAll(dir)
	}
}

func freeURL() url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
