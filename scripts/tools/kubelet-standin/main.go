// kubelet-standin: the kubelet's port-forward endpoint and nothing else, for
// the agent's end-to-end tests of node-local instances
// (agent/tests/e2e_port_forward.rs). A Node object whose InternalIP is
// 127.0.0.1 and whose kubeletEndpoint port is this server's makes
// kube-apiserver proxy `pods/portforward` here; the streams are served by
// the kubelet's own code (k8s.io/kubelet/pkg/cri/streaming/portforward:
// the websocket channel protocol kube-rs speaks, and SPDY) and forwarded to
// a simulated Kura pod on loopback.
//
//	kubelet-standin --listen 127.0.0.1:0 --routes FILE [--hold 200ms]
//
// FILE (read at every port-forward, so a test may change it) is a JSON
// object {"NAMESPACE/POD": "HOST" | "refuse"}: the stream to port P of that
// pod is forwarded to HOST:P; "refuse" (or a pod not listed) fails the
// forward, as a kubelet does when nothing listens in the pod. --hold makes
// every forward wait that long before it connects (a slow kubelet), so that
// the streams of one sweep overlap.
//
// Serves HTTPS with a self-signed certificate (kube-apiserver does not check
// a kubelet's certificate when it has no --kubelet-certificate-authority).
// stdout, one line per event:
//
//	listening ADDR
//	forward NAMESPACE/POD PORT -> HOST:PORT holding=N maxHolding=M
//	refuse NAMESPACE/POD PORT: REASON
//	done NAMESPACE/POD PORT
//
// holding counts the forwards inside their --hold wait; maxHolding is its
// largest value so far: every stream the client keeps open is counted
// there, so a client's bound on open streams is a bound on maxHolding.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

var (
	out     sync.Mutex
	holding int
	maxHold int
)

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

type forwarder struct {
	namespace string
	routes    string
	hold      time.Duration
}

func (f *forwarder) route(pod string) (string, error) {
	raw, err := os.ReadFile(f.routes)
	if err != nil {
		return "", err
	}
	var routes map[string]string
	if err := json.Unmarshal(raw, &routes); err != nil {
		return "", fmt.Errorf("routes %s: %v", f.routes, err)
	}
	host, ok := routes[f.namespace+"/"+pod]
	if !ok {
		return "", fmt.Errorf("pod %s/%s is not on this node", f.namespace, pod)
	}
	if host == "refuse" {
		return "", fmt.Errorf("dial tcp 127.0.0.1:0: connect: connection refused")
	}
	return host, nil
}

// PortForward is the kubelet runtime's part: connect to the port in the
// pod and copy both ways until either side ends.
func (f *forwarder) PortForward(ctx context.Context, pod string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	key := f.namespace + "/" + pod
	host, err := f.route(pod)
	if err != nil {
		say("refuse %s %d: %v", key, port, err)
		return err
	}
	out.Lock()
	holding++
	if holding > maxHold {
		maxHold = holding
	}
	now, most := holding, maxHold
	out.Unlock()
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	say("forward %s %d -> %s holding=%d maxHolding=%d", key, port, target, now, most)
	time.Sleep(f.hold)
	out.Lock()
	holding--
	out.Unlock()
	defer say("done %s %d", key, port)
	conn, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	finished := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); finished <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); finished <- struct{}{} }()
	<-finished
	return nil
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kubelet-standin"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	routes := flag.String("routes", "", "JSON file: {\"NAMESPACE/POD\": \"HOST\" | \"refuse\"}")
	hold := flag.Duration("hold", 0, "wait this long in every forward before connecting")
	flag.Parse()
	if *routes == "" {
		log.Fatal("--routes is required")
	}
	cert, err := selfSigned()
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	// The kubelet's route: /portForward/{namespace}/{pod}[/{uid}].
	mux.HandleFunc("/portForward/", func(w http.ResponseWriter, req *http.Request) {
		parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/portForward/"), "/")
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			http.Error(w, "want /portForward/{namespace}/{pod}", http.StatusNotFound)
			return
		}
		var uid types.UID
		if len(parts) > 2 {
			uid = types.UID(parts[2])
		}
		opts, err := portforward.NewV4Options(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f := &forwarder{namespace: parts[0], routes: *routes, hold: *hold}
		portforward.ServePortForward(w, req, f, parts[1], uid, opts,
			4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	say("listening %s", ln.Addr())
	server := &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		// The upgraded streams are hijacked; no timeout on them here.
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(server.ServeTLS(ln, "", ""))
}
