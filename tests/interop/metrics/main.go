// Command metricscheck scrapes sceau's metrics endpoint with Go's HTTP
// client and parses the answer with Prometheus's own text parser
// (github.com/prometheus/common/expfmt's TextParser, the one
// `promtool check metrics` reads with), then checks what sceau promises in
// docs/metrics.md.
//
//	metricscheck --url http://127.0.0.1:PORT/metrics --save before.txt
//	(make calls)
//	metricscheck --url http://127.0.0.1:PORT/metrics --baseline before.txt
//
// Every run fails on any HTTP or parse error, on a Content-Type that is not
// the text format 0.0.4, and on a missing metric family or a family of the
// wrong type. With --baseline it also fails unless the call counters and
// the call and TPM command latency histograms moved since the saved scrape;
// with --expect-coalesced, the coalescing counter too (it moves only when
// Decrypts of one ciphertext run at once). It prints one PASS or FAIL line
// per check and exits 1 if any failed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The families docs/metrics.md lists, with their types.
var families = map[string]dto.MetricType{
	"sceau_calls_total":                  dto.MetricType_COUNTER,
	"sceau_call_duration_seconds":        dto.MetricType_HISTOGRAM,
	"sceau_tpm_command_duration_seconds": dto.MetricType_HISTOGRAM,
	"sceau_tpm_queue_depth":              dto.MetricType_GAUGE,
	"sceau_tpm_retries_total":            dto.MetricType_COUNTER,
	"sceau_tpm_reopens_total":            dto.MetricType_COUNTER,
	"sceau_tpm_deadline_misses_total":    dto.MetricType_COUNTER,
	"sceau_decrypt_coalesced_total":      dto.MetricType_COUNTER,
	"sceau_tpm_healthy":                  dto.MetricType_GAUGE,
	"sceau_build_info":                   dto.MetricType_GAUGE,
	"sceau_key_id_info":                  dto.MetricType_GAUGE,
}

var failed int

func check(name string, ok bool, detail string, args ...any) {
	if ok {
		fmt.Printf("PASS %s\n", name)
		return
	}
	failed++
	fmt.Printf("FAIL %s: %s\n", name, fmt.Sprintf(detail, args...))
}

func main() {
	url := flag.String("url", "", "the metrics URL (required)")
	save := flag.String("save", "", "write the scrape to this file")
	baseline := flag.String("baseline", "", "a scrape saved with --save: counters must have moved since")
	coalesced := flag.Bool("expect-coalesced", false, "with --baseline: concurrent Decrypts of one ciphertext were made, so the coalescing counter must have moved too")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "metricscheck: --url is required")
		os.Exit(2)
	}

	body, header, err := scrape(*url)
	if err != nil {
		fmt.Printf("FAIL scrape: %v\n", err)
		os.Exit(1)
	}
	format := expfmt.ResponseFormat(header)
	check("content-type", format.FormatType() == expfmt.TypeTextPlain,
		"%q is not the text format", header.Get("Content-Type"))
	got, err := parse(body)
	check("parse", err == nil, "%v", err)
	if err != nil {
		os.Exit(1)
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		kind := families[name]
		family, present := got[name]
		check("family "+name, present && family.GetType() == kind,
			"present=%v type=%v, want %v", present, family.GetType(), kind)
	}
	check("build_info", hasLabel(got["sceau_build_info"], "version"), "no version label")
	check("key_id_info", labelPrefix(got["sceau_key_id_info"], "key_id", "sceau-"), "no key_id sceau-…")
	check("tpm_healthy", gauge(got["sceau_tpm_healthy"]) == 1, "not 1")

	if *save != "" {
		if err := os.WriteFile(*save, body, 0o600); err != nil {
			fmt.Printf("FAIL save: %v\n", err)
			os.Exit(1)
		}
	}
	if *baseline != "" {
		saved, err := os.ReadFile(*baseline)
		check("read baseline", err == nil, "%v", err)
		before, err := parse(saved)
		check("parse baseline", err == nil, "%v", err)
		if err == nil {
			moved(before, got, *coalesced)
		}
	}
	fmt.Printf("%d failed\n", failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func scrape(url string) ([]byte, http.Header, error) {
	client := http.Client{Timeout: 10 * time.Second}
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	// What Prometheus 3 sends (scrape_protocols' default order).
	request.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,"+
		"application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
	response, err := client.Do(request)
	if err != nil {
		return nil, nil, err
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return nil, nil, err
	}
	if response.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("HTTP %s", response.Status)
	}
	return body, response.Header, nil
}

// parse uses the legacy (pre-UTF-8) name rules, the stricter ones: a name
// that passes them passes every Prometheus version.
func parse(body []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

// moved checks that what the script's calls must change did change.
func moved(before, after map[string]*dto.MetricFamily, coalesced bool) {
	for _, method := range []string{"Encrypt", "Decrypt", "Status"} {
		labels := map[string]string{"method": method, "code": "OK"}
		check("calls_total "+method+" moved",
			counter(after["sceau_calls_total"], labels) > counter(before["sceau_calls_total"], labels),
			"%v", labels)
		m := map[string]string{"method": method}
		check("call_duration "+method+" moved",
			histogramCount(after["sceau_call_duration_seconds"], m) > histogramCount(before["sceau_call_duration_seconds"], m),
			"%v", m)
	}
	for _, command := range []string{"Create", "Load", "Unseal", "FlushContext"} {
		c := map[string]string{"command": command}
		check("tpm_command_duration "+command+" moved",
			histogramCount(after["sceau_tpm_command_duration_seconds"], c) > histogramCount(before["sceau_tpm_command_duration_seconds"], c),
			"%v", c)
	}
	if !coalesced {
		return
	}
	check("decrypt_coalesced moved",
		counter(after["sceau_decrypt_coalesced_total"], nil) > counter(before["sceau_decrypt_coalesced_total"], nil),
		"no Decrypt was coalesced")
}

func matches(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, pair := range m.GetLabel() {
		if want, ok := labels[pair.GetName()]; ok {
			if pair.GetValue() != want {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}

func counter(family *dto.MetricFamily, labels map[string]string) float64 {
	for _, m := range family.GetMetric() {
		if matches(m, labels) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func histogramCount(family *dto.MetricFamily, labels map[string]string) uint64 {
	for _, m := range family.GetMetric() {
		if matches(m, labels) {
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func gauge(family *dto.MetricFamily) float64 {
	for _, m := range family.GetMetric() {
		return m.GetGauge().GetValue()
	}
	return -1
}

func hasLabel(family *dto.MetricFamily, name string) bool {
	for _, m := range family.GetMetric() {
		for _, pair := range m.GetLabel() {
			if pair.GetName() == name && pair.GetValue() != "" {
				return true
			}
		}
	}
	return false
}

func labelPrefix(family *dto.MetricFamily, name, prefix string) bool {
	for _, m := range family.GetMetric() {
		for _, pair := range m.GetLabel() {
			if pair.GetName() == name && strings.HasPrefix(pair.GetValue(), prefix) {
				return true
			}
		}
	}
	return false
}
