import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// A real nginx (Debian's `/usr/sbin/nginx`) serving a temporary directory on loopback,
/// for integration tests against a production HTTP server rather than a test double.
///
/// Everything nginx touches lives in one temporary directory: the config (rendered from
/// Scripts/nginx/nginx.conf.template, which the benchmark's launcher uses too), the pid
/// file, the error log, one access log per server (with the `Range` and `If-Range` request
/// headers in every line), all `*_temp_path`s, the document root and, with TLS, a CA and a
/// server certificate made by the `openssl` CLI at test time. nginx runs in the foreground as
/// a single process (`daemon off; master_process off;`), a child of the test; `stop()` (also
/// registered as a teardown block) sends SIGTERM, then SIGKILL if it lingers, and reaps it.
final class Nginx: @unchecked Sendable {
    static let binary = "/usr/sbin/nginx"

    struct Configuration {
        /// Location prefix → nginx `limit_rate` value, e.g. `["/slow/": "4m"]` (bytes a second,
        /// per connection; `k`/`m` are 1024-based).
        var rateLimits: [String: String] = [:]
        /// Also serve the same root over TLS with a certificate from a test CA.
        var tls = false
        /// Extra `location` blocks for the plain and the TLS server. `{PLAIN_PORT}` and
        /// `{TLS_PORT}` are replaced by the ports actually chosen.
        var plainLocations: [String] = []
        var tlsLocations: [String] = []
    }

    struct HarnessError: Error, CustomStringConvertible {
        let description: String
    }

    /// The temporary directory holding everything; `root` is the document root inside it.
    let directory: String
    let root: String
    let configuration: Configuration
    private(set) var port: UInt16 = 0
    private(set) var tlsPort: UInt16 = 0
    private var process: Process?
    private let lock = NSLock()

    var plainAccessLog: String { directory + "/access-plain.log" }
    var tlsAccessLog: String { directory + "/access-tls.log" }
    var errorLog: String { directory + "/error.log" }
    /// The test CA's certificate (PEM), to pass as `--cacert`.
    var caCertificate: String { directory + "/tls/ca.pem" }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)" + Self.slash(path) }
    func httpsURL(_ path: String, host: String = "127.0.0.1") -> String { "https://\(host):\(tlsPort)" + Self.slash(path) }

    /// Creates the directories and (with TLS) the certificates; call `start()` once the files
    /// to serve are in `root`. The temporary directory and the server are cleaned up when `test` ends.
    init(_ test: XCTestCase, configuration: Configuration = Configuration()) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            throw HarnessError(description: "\(Self.binary) is missing: install Debian's nginx package (Scripts/setup does)")
        }
        self.configuration = configuration
        directory = NSTemporaryDirectory() + "sluice-nginx-" + UUID().uuidString
        root = directory + "/root"
        for sub in ["root", "temp/client", "temp/proxy", "temp/fastcgi", "temp/uwsgi", "temp/scgi", "tls"] {
            try FileManager.default.createDirectory(atPath: directory + "/" + sub, withIntermediateDirectories: true)
        }
        let directory = self.directory
        test.addTeardownBlock { [self] in
            self.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }
        if configuration.tls { try makeCertificates() }
    }

    /// Starts nginx on free loopback ports and returns once every server accepts connections.
    /// A port picked as free can be taken by someone else before nginx binds it: then nginx
    /// exits at once and this tries again with new ports (three attempts in all).
    func start() throws {
        var failures: [String] = []
        for _ in 0..<3 {
            let plain = try Self.freePort()
            var secure: UInt16 = 0
            if configuration.tls {
                repeat { secure = try Self.freePort() } while secure == plain
            }
            try writeConfiguration(plainPort: plain, tlsPort: secure)
            try? FileManager.default.removeItem(atPath: errorLog)
            let child = Process()
            child.executableURL = URL(fileURLWithPath: Self.binary)
            // -e: the error log before the config is read; -p: the prefix for relative paths.
            child.arguments = ["-p", directory + "/", "-e", errorLog, "-c", directory + "/nginx.conf"]
            child.standardInput = FileHandle.nullDevice
            let output = directory + "/nginx.out"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
            child.standardOutput = handle
            child.standardError = handle
            try child.run()
            try? handle.close()
            lock.lock()
            process = child
            lock.unlock()

            let ports = configuration.tls ? [plain, secure] : [plain]
            // (isRunning again: a connect could reach whoever took the port while nginx dies.)
            if Self.waitUntilAccepting(ports: ports, while: { child.isRunning }, timeout: 10) && child.isRunning {
                port = plain
                tlsPort = secure
                return
            }
            let log = (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? ""
            let out = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            failures.append("ports \(ports): " + (log + out).trimmingCharacters(in: .whitespacesAndNewlines))
            stop()
        }
        throw HarnessError(description: "nginx did not start:\n" + failures.joined(separator: "\n"))
    }

    /// SIGTERM, up to five seconds to exit, then SIGKILL; always reaps the child. Idempotent.
    func stop() {
        lock.lock()
        let child = process
        process = nil
        lock.unlock()
        guard let child else { return }
        if child.isRunning {
            kill(child.processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(5)
            while child.isRunning && Date() < deadline { usleep(10_000) }
            if child.isRunning { kill(child.processIdentifier, SIGKILL) }
        }
        child.waitUntilExit()
    }

    /// Waits (bounded) until `log` contains every string in `needles`; returns its text.
    /// nginx writes an access log line when a request ends, which for a connection the client
    /// dropped is when nginx next touches the socket.
    func waitForLog(_ log: String, containing needles: [String], timeout: TimeInterval = 10) -> String {
        let deadline = Date().addingTimeInterval(timeout)
        var text = ""
        repeat {
            text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if needles.allSatisfy(text.contains) { return text }
            usleep(20_000)
        } while Date() < deadline
        return text
    }

    // MARK: - Configuration

    /// Renders Scripts/nginx/nginx.conf.template (the benchmark's launcher renders the same
    /// file): one server for plain HTTP and, with TLS, a second one with the certificate.
    private func writeConfiguration(plainPort: UInt16, tlsPort: UInt16) throws {
        func substitute(_ text: String) -> String {
            text.replacingOccurrences(of: "{PLAIN_PORT}", with: String(plainPort))
                .replacingOccurrences(of: "{TLS_PORT}", with: String(tlsPort))
        }
        let rateLimited = configuration.rateLimits.sorted { $0.key < $1.key }.map { prefix, rate in
            "location \(prefix) { limit_rate \(rate); }"
        }
        var servers = [
            NginxConfigTemplate.Server(
                listen: "127.0.0.1:\(plainPort)", name: "plain",
                locations: rateLimited + configuration.plainLocations.map(substitute))
        ]
        if configuration.tls {
            let certificate = ["ssl_certificate \(directory)/tls/server.pem;", "ssl_certificate_key \(directory)/tls/server.key;"]
            servers.append(
                NginxConfigTemplate.Server(
                    listen: "127.0.0.1:\(tlsPort) ssl", name: "tls",
                    locations: rateLimited + certificate + configuration.tlsLocations.map(substitute)))
        }
        let template = try NginxConfigTemplate(contentsOf: NginxConfigTemplate.sharedPath)
        let config = try template.render(user: getuid() == 0 ? "user root;" : "", directory: directory, root: root, servers: servers)
        try config.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
    }

    /// A CA (`openssl req -x509`) and a leaf for 127.0.0.1 and localhost signed by it
    /// (`openssl x509 -req -extfile`), in `directory/tls`.
    private func makeCertificates() throws {
        let tls = directory + "/tls"
        try """
        subjectAltName = IP:127.0.0.1, DNS:localhost
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature, keyEncipherment
        extendedKeyUsage = serverAuth
        """.write(toFile: tls + "/leaf.ext", atomically: true, encoding: .utf8)
        let commands = [
            "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=Sluice Test CA'"
                + " -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign'"
                + " -keyout '\(tls)/ca.key' -out '\(tls)/ca.pem'",
            "openssl req -newkey rsa:2048 -nodes -subj '/CN=localhost' -keyout '\(tls)/server.key' -out '\(tls)/server.csr'",
            "openssl x509 -req -in '\(tls)/server.csr' -CA '\(tls)/ca.pem' -CAkey '\(tls)/ca.key'"
                + " -CAserial '\(tls)/ca.srl' -CAcreateserial -days 2 -extfile '\(tls)/leaf.ext' -out '\(tls)/server.pem'",
        ]
        for command in commands {
            let result = try shell(command + " 2>&1", capture: true)
            guard result.status == 0 else {
                throw HarnessError(description: "certificate generation failed (\(command)):\n\(result.output)")
            }
        }
    }

    // MARK: - Sockets

    private static func slash(_ path: String) -> String { path.hasPrefix("/") ? path : "/" + path }

    /// A loopback port that was free a moment ago: bind port 0, read it back, close.
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError(description: "socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw HarnessError(description: "bind: \(String(cString: strerror(errno)))") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw HarnessError(description: "getsockname: \(String(cString: strerror(errno)))") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// True once a TCP connect to 127.0.0.1 succeeds on every port; polls every 20 ms,
    /// gives up after `timeout` or as soon as `alive()` turns false.
    static func waitUntilAccepting(ports: [UInt16], while alive: () -> Bool, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        var pending = ports
        while Date() < deadline {
            pending.removeAll(where: canConnect)
            if pending.isEmpty { return true }
            if !alive() { return false }
            usleep(20_000)
        }
        return false
    }

    static func canConnect(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// Starts an nginx for `test` after `populate` has put the files to serve into its root.
/// A missing nginx binary is a test failure (never a skip): the suite's setup installs it.
func startNginx(
    _ test: XCTestCase, configuration: Nginx.Configuration = Nginx.Configuration(),
    file: StaticString = #filePath, line: UInt = #line,
    populate: (_ root: String) throws -> Void
) throws -> Nginx {
    guard FileManager.default.isExecutableFile(atPath: Nginx.binary) else {
        XCTFail(
            "\(Nginx.binary) is missing: these tests need a real nginx (Debian package 'nginx'; Scripts/setup installs it)",
            file: file, line: line)
        throw Nginx.HarnessError(description: "\(Nginx.binary) is missing")
    }
    let nginx = try Nginx(test, configuration: configuration)
    try populate(nginx.root)
    try nginx.start()
    return nginx
}

/// Scripts/nginx/nginx.conf.template with its `{{PLACEHOLDERS}}` filled in; the lines from
/// `#server-begin` to `#server-end` are written once per server. Scripts/nginx/start fills in
/// the same file for the benchmark, so the tests and the benchmark run the same nginx setup.
struct NginxConfigTemplate {
    /// Tests/SluiceTestSupport/Nginx.swift → the repository → Scripts/nginx/nginx.conf.template.
    static let sharedPath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/nginx/nginx.conf.template").path

    struct Server {
        var listen: String
        /// Names the access log: `DIR/access-NAME.log`.
        var name: String
        /// nginx `limit_rate` for the whole server; "0" is none.
        var limitRate = "0"
        /// Lines inside the `server` block: locations, TLS files.
        var locations: [String] = []
    }

    private let head: [Substring], server: [Substring], tail: [Substring]

    init(contentsOf path: String) throws {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw Nginx.HarnessError(description: "cannot read the nginx configuration template \(path): \(error)")
        }
        try self.init(text: text, path: path)
    }

    init(text: String, path: String = "the template") throws {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let begin = lines.firstIndex(of: "#server-begin"), let end = lines.firstIndex(of: "#server-end"), begin < end else {
            throw Nginx.HarnessError(description: "\(path) has no #server-begin … #server-end section")
        }
        head = Array(lines[..<begin])
        server = Array(lines[(begin + 1)..<end])
        tail = Array(lines[(end + 1)...])
    }

    func render(user: String, directory: String, root: String, servers: [Server]) throws -> String {
        let shared = ["USER": user, "DIR": directory, "ROOT": root]
        var lines = head.map(String.init)
        for each in servers {
            let values = shared.merging([
                "LISTEN": each.listen, "NAME": each.name, "LIMIT_RATE": each.limitRate,
                "LOCATIONS": each.locations.joined(separator: "\n        "),
            ]) { _, new in new }
            lines += server.map { Self.fill(String($0), values) }
        }
        lines += tail.map(String.init)
        let config = lines.map { Self.fill($0, shared) }.joined(separator: "\n")
        if let unfilled = config.range(of: "{{") {
            let name = config[unfilled.lowerBound...].prefix { $0 != "}" } + "}}"
            throw Nginx.HarnessError(description: "the nginx template has a placeholder the tests do not fill: \(name)")
        }
        return config
    }

    private static func fill(_ line: String, _ values: [String: String]) -> String {
        values.reduce(line) { text, value in text.replacingOccurrences(of: "{{\(value.key)}}", with: value.value) }
    }
}
