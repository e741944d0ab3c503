package collector

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
)

// BenchmarkPipeline normalises b.N OCSF lines from a file and ships them to
// an in-process reference hub (which shares the CPU budget).
func BenchmarkPipeline(b *testing.B) {
	dir := b.TempDir()
	in := filepath.Join(dir, "events.log")
	f, err := os.Create(in)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; i < b.N; i++ {
		io.WriteString(w, benchLine(i))
	}
	w.Flush()
	f.Close()
	srv, err := hubtest.New(hubtest.Options{DiscardEvents: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	tf, _ := srv.TokenFile(dir, "bench")
	hc, err := hub.New(hub.Config{URL: srv.URL, AgentID: "bench", TokenFile: tf})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	sum, err := Run(context.Background(), Config{
		Inputs: []string{in}, SpoolDir: filepath.Join(dir, "spool"), AgentID: "bench", Hub: hc,
		BatchSize: 2000, FlushInterval: 50 * time.Millisecond, Once: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	if sum.Shipped["hub"] != int64(b.N) || srv.Stats().Distinct != b.N {
		b.Fatalf("shipped %d, hub holds %d, want %d", sum.Shipped["hub"], srv.Stats().Distinct, b.N)
	}
}

func benchLine(i int) string {
	host := []string{"github.com", "pypi.org", "registry.npmjs.org", "evil.example"}[i%4]
	action := 1
	if host == "evil.example" {
		action = 2
	}
	return fmt.Sprintf(`{"class_uid":4002,"class_name":"HTTP Activity","category_uid":4,"category_name":"Network Activity","activity_id":3,"activity_name":"Get","type_uid":400203,"metadata":{"version":"1.8.0","uid":"sbx-agent-7f3a","product":{"name":"palisade egress-proxy","vendor_name":"Palisade","version":"0.1.0"},"log_name":"egress"},"time":%d,"severity_id":1,"actor":{"process":{"pid":%d,"name":"curl","file":{"name":"curl","path":"/usr/bin/curl","type_id":1,"hashes":[{"algorithm_id":3,"algorithm":"SHA-256","value":"6f1b7c5e1e0a3d4f2b9c8a7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f"}]}}},"src_endpoint":{"ip":"10.200.0.2","port":40112},"dst_endpoint":{"hostname":"%s","ip":"203.0.113.9","port":443},"action_id":%d,"disposition_id":%d,"firewall_rule":{"name":"default","type":"egress-proxy"},"policy":{"name":"mac-hermes-policy","uid":"sha256:9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de","version":"3"},"http_request":{"http_method":"GET","url":{"scheme":"https","hostname":"%s","port":443,"path":"/simple/pkg-%d/","url_string":"https://%s/simple/pkg-%d/"},"version":"HTTP/1.1","user_agent":"pip/24.0"},"status_detail":"decided by network_policies"}`+"\n",
		1767225600000+i, 1000+i%5000, host, action, action, host, i%977, host, i%977)
}
