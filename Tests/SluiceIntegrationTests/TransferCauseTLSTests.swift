import Foundation
import Sluice
import XCTest
@testable import SluiceTestSupport

/// TLS failures arrive at the caller of `Pipeline.run` as their `TransferCause` (the other
/// faults are in the unit target's `TransferCauseTests`), through one connection and several;
/// the CLI turns `.certificate` into advice about `--cacert` without reading the message.
final class TransferCauseTLSTests: XCTestCase {
    func testTLSFailuresArriveAsTheirCause() throws {
        var configuration = Nginx.Configuration()
        configuration.tls = true
        let nginx = try startNginx(self, configuration: configuration) { root in
            try Data(makeTestData(count: 64 << 10, seed: 5)).write(to: URL(fileURLWithPath: root + "/data.bin"))
        }
        let directory = try makeTemporaryDirectory(self)
        let url = nginx.httpsURL("/data.bin")
        let server = "127.0.0.1:\(nginx.tlsPort)"

        for connections in [1, 4] {
            // No CA that signed the server's certificate: it cannot be verified.
            var options = PipelineOptions()
            options.http.retries = 1
            options.http.backoffBase = 0.01
            let untrusted = try fetchPipelineError(url, connections: connections, options: options, output: "\(directory)/u\(connections)")
            guard case .transfer(_, .certificate(let host, _), .atOnce)? = untrusted else {
                XCTFail("connections=\(connections): \(String(describing: untrusted))")
                continue
            }
            XCTAssertEqual(host, server)
            XCTAssertEqual(untrusted?.exitCode, 3)

            // A CA file that does not exist: TLS cannot even be set up.
            options.http.caCertificate = directory + "/missing-ca.pem"
            let missing = try fetchPipelineError(url, connections: connections, options: options, output: "\(directory)/m\(connections)")
            guard case .transfer(_, .tls(let tlsHost, let reason), _)? = missing else {
                XCTFail("connections=\(connections): \(String(describing: missing))")
                continue
            }
            XCTAssertEqual(tlsHost, server)
            XCTAssertTrue(reason.contains("CA certificate"), reason)
            XCTAssertEqual(missing?.exitCode, 3)
        }

        // Trusted, but reached under a name the certificate was not issued for (the same
        // loopback address written as an IPv4-mapped IPv6 one): no CA file fixes that.
        var trusting = PipelineOptions()
        trusting.http.caCertificate = nginx.caCertificate
        trusting.http.retries = 1
        let misnamedURL = nginx.httpsURL("/data.bin", host: "[::ffff:127.0.0.1]")
        let misnamed = try fetchPipelineError(misnamedURL, connections: 1, options: trusting, output: "\(directory)/n")
        guard case .transfer(_, .certificateName, .atOnce)? = misnamed else {
            return XCTFail("a name mismatch: \(String(describing: misnamed))")
        }
        let named = try SluiceBinary.run(["-q", "--retries", "1", "--cacert", nginx.caCertificate, "fetch \(misnamedURL) | file \(directory)/cli-n"])
        XCTAssertEqual(named.status, 3, named.stderr)
        XCTAssertTrue(named.stderr.contains("is not for that name"), named.stderr)
        XCTAssertTrue(named.stderr.contains("use a host name the certificate was issued for"), named.stderr)
        XCTAssertFalse(named.stderr.contains("--cacert"), "no CA fixes a name mismatch: \(named.stderr)")

        let cli = try SluiceBinary.run(["-q", "--retries", "1", "fetch \(url) | file \(directory)/cli"])
        XCTAssertEqual(cli.status, 3, cli.stderr)
        XCTAssertTrue(cli.stderr.contains("TLS certificate of \(server) could not be verified"), cli.stderr)
        XCTAssertTrue(cli.stderr.contains("pass --cacert FILE to trust a private CA"), cli.stderr)
    }
}
