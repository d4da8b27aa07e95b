import Foundation
import XCTest
@testable import SluiceTestSupport

/// `fetch` against a real nginx: plain transfers, throttled transfers killed with SIGKILL
/// and resumed with `Range`, TLS with a test CA, and the https → http downgrade.
final class NginxFetchTests: XCTestCase {

    // MARK: - Plain fetch

    /// ~20 MB served by nginx: verified, written to a file and to stdout; its gzip variant
    /// decompressed — all byte-identical to what nginx serves. A wrong digest fails (exit 4).
    func testPlainFetchVerifyAndGunzipMatchTheServedFiles() throws {
        let data = Data(makeTestData(count: 20 << 20, seed: 4242))
        var digest = ""
        let nginx = try startNginx(self) { root in
            try data.write(to: URL(fileURLWithPath: root + "/data.bin"))
            XCTAssertEqual(try shell("gzip -6 -c '\(root)/data.bin' > '\(root)/data.bin.gz'").status, 0)
            digest = try sha256Hex(ofFile: root + "/data.bin")
        }
        XCTAssertEqual(digest.count, 64)
        let gzDigest = try sha256Hex(ofFile: nginx.root + "/data.bin.gz")
        let dir = try makeTemporaryDirectory(self)

        // fetch | verify | file
        let toFile = try SluiceBinary.run(["-q", "fetch \(nginx.url("/data.bin")) | verify sha256:\(digest) | file \(dir)/out.bin"])
        XCTAssertEqual(toFile.status, 0, toFile.stderr)
        XCTAssertEqual(toFile.stderr, "", "-q prints nothing on success")
        XCTAssertEqual(try shell("cmp '\(nginx.root)/data.bin' '\(dir)/out.bin'").status, 0, "file sink output differs")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.bin.sluice"), "no checkpoint after success")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.bin.sluice-part"), "no partial file after success")

        // fetch | verify | stdout (upper-case digest is accepted too)
        let toStdout = try SluiceBinary.run(["-q", "fetch \(nginx.url("/data.bin")) | verify sha256:\(digest.uppercased()) | stdout"])
        XCTAssertEqual(toStdout.status, 0, toStdout.stderr)
        XCTAssertEqual(toStdout.stdout.count, data.count)
        XCTAssertTrue(toStdout.stdout == data, "stdout sink output differs")

        // fetch .gz | verify (compressed) | gunzip | verify (plain) | file
        let gunzipped = try SluiceBinary.run([
            "-q", "fetch \(nginx.url("/data.bin.gz")) | verify sha256:\(gzDigest) | gunzip | verify sha256:\(digest) | file \(dir)/out.gunzip",
        ])
        XCTAssertEqual(gunzipped.status, 0, gunzipped.stderr)
        XCTAssertEqual(try shell("cmp '\(nginx.root)/data.bin' '\(dir)/out.gunzip'").status, 0, "gunzip output differs")
        XCTAssertEqual(try sha256Hex(ofFile: dir + "/out.gunzip"), digest)

        // The verifier really checks: the wrong digest is exit 4 and leaves no output.
        let wrong = String(digest.reversed())
        let mismatch = try SluiceBinary.run(["-q", "fetch \(nginx.url("/data.bin")) | verify sha256:\(wrong) | file \(dir)/bad.bin"])
        XCTAssertEqual(mismatch.status, 4, mismatch.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/bad.bin"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/bad.bin.sluice-part"))

        // nginx served every request in full (200, no ranges on fresh runs).
        let log = nginx.waitForLog(nginx.plainAccessLog, containing: ["GET /data.bin.gz 200"])
        XCTAssertFalse(log.contains("range=\"bytes="), "fresh runs must not send Range:\n\(log)")
    }

    // MARK: - Kill -9 and resume under limit_rate

    /// A gzip file (~25 MB: text, random bytes, text) through nginx's `limit_rate 2m` is
    /// ~12 s of transfer. Three to five runs are each SIGKILLed at a random moment one to three
    /// checkpoints after they started, then it is rerun until it completes. Every rerun must resume
    /// (a `resume` event at or after the last checkpoint the killed run reported), nginx must
    /// have seen `Range: bytes=OFFSET-` with `If-Range` for each resume and answered 206, and
    /// the final output must equal the original.
    func testThrottledTransferSurvivesRepeatedKill9AndResumesWithRange() throws {
        let megabyte = 1 << 20
        var expected = ""
        var gzDigest = ""
        var gzSize = 0
        var configuration = Nginx.Configuration()
        configuration.rateLimits = ["/slow/": "2m"]
        let nginx = try startNginx(self, configuration: configuration) { root in
            try FileManager.default.createDirectory(atPath: root + "/slow", withIntermediateDirectories: true)
            let text = root + "/text.part"
            try Data(makeTestData(count: 8 * megabyte, seed: 99)).write(to: URL(fileURLWithPath: text))
            let plain = root + "/plain.bin"
            let made = try shell(
                "{ cat '\(text)'; head -c \(20 * megabyte) /dev/urandom; cat '\(text)'; } > '\(plain)'"
                    + " && gzip -6 -c '\(plain)' > '\(root)/slow/big.gz' && rm '\(text)'")
            XCTAssertEqual(made.status, 0)
            expected = try sha256Hex(ofFile: plain)
            gzDigest = try sha256Hex(ofFile: root + "/slow/big.gz")
            gzSize = try (FileManager.default.attributesOfItem(atPath: root + "/slow/big.gz")[.size] as? Int) ?? 0
        }
        XCTAssertGreaterThan(gzSize, 22 * megabyte)
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/big.out"
        let args = [
            "--progress", "json", "--checkpoint-interval", "1MiB",
            "fetch \(nginx.url("/slow/big.gz")) | verify sha256:\(gzDigest) | gunzip | file \(out)",
        ]

        // Kill points: each killed run is allowed 1 to 3 checkpoints past where it started (its
        // `resume` offset), then killed after a random delay of up to half a checkpoint
        // interval (~0.25 s at 2 MiB/s). nginx lets the first second's worth (2 MiB) of every
        // request through at once, so a run can get ahead; kills stop 4 MiB before the end.
        var generator = SystemRandomNumberGenerator()
        let kills = Int.random(in: 3...5, using: &generator)

        func event(_ line: String, _ name: String) -> [String: Any]? {
            guard line.contains("\"event\":\"\(name)\"") else { return nil }
            return progressEvents([line]).first
        }

        var runs: [(status: Int32, events: [[String: Any]])] = []
        var plan: [String] = []
        for _ in 0..<kills {
            let run = try StreamingProcess(SluiceBinary.path, args)
            var base = 0
            let started = run.waitForLine(timeout: 30) { event($0, "start") != nil }
            _ = run.waitForLine(timeout: 0) { line in
                guard let offset = event(line, "resume")?["source_offset"] as? Int else { return false }
                base = offset
                return true
            }
            let room = (gzSize - 4 * megabyte - base) / megabyte
            let steps = min(Int.random(in: 1...3, using: &generator), max(room, 1))
            let delay = UInt32.random(in: 0...250_000, using: &generator)
            let target = base + steps * megabyte
            plan.append("\(base)+\(steps)MiB+\(delay / 1000)ms")
            let reached =
                started && target <= gzSize - 4 * megabyte
                && run.waitForLine(timeout: 30) { (event($0, "checkpoint")?["checkpoint_offset"] as? Int ?? -1) >= target }
            if reached { usleep(delay) }  // the fault injection: where between two checkpoints the kill lands
            run.signal(SIGKILL)  // in every case: never leave it running
            let (status, lines) = run.wait()
            XCTAssertTrue(
                reached,
                "run \(runs.count + 1) (plan \(plan)) never reported a checkpoint at \(target):\n"
                    + lines.joined(separator: "\n"))
            XCTAssertEqual(status, SIGKILL, "run \(runs.count + 1) should have died of SIGKILL:\n\(lines.joined(separator: "\n"))")
            runs.append((status, progressEvents(lines)))
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), "the output must not exist before the run completes")
            XCTAssertTrue(FileManager.default.fileExists(atPath: out + ".sluice"), "a killed run leaves its checkpoint")
        }
        print("NginxFetchTests: kill plan (resumed at + checkpoints + delay) \(plan) of \(gzSize) bytes")
        // Then rerun (bounded) until one completes.
        var finished = false
        for _ in 0..<5 where !finished {
            let run = try StreamingProcess(SluiceBinary.path, args)
            let (status, lines) = run.wait()
            runs.append((status, progressEvents(lines)))
            finished = status == 0
            XCTAssertEqual(status, 0, lines.joined(separator: "\n"))
        }
        XCTAssertTrue(finished, "the transfer never completed")
        XCTAssertTrue(FileManager.default.fileExists(atPath: out))
        XCTAssertEqual(try sha256Hex(ofFile: out), expected, "the resumed output differs from the original")
        XCTAssertFalse(FileManager.default.fileExists(atPath: out + ".sluice"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: out + ".sluice-part"))

        // Every rerun resumed, at or after the last checkpoint its killed predecessor reported.
        var resumeOffsets: [Int] = []
        for index in 1..<runs.count {
            let names = runs[index].events.compactMap { $0["event"] as? String }
            let resume = runs[index].events.first { $0["event"] as? String == "resume" }?["source_offset"] as? Int
            let lastCheckpoint =
                runs[index - 1].events.filter { $0["event"] as? String == "checkpoint" }
                .compactMap { $0["checkpoint_offset"] as? Int }.max() ?? 0
            XCTAssertFalse(names.contains("restart"), "run \(index + 1) restarted instead of resuming: \(names)")
            guard let resume else {
                XCTFail("run \(index + 1) did not resume; events: \(names)")
                continue
            }
            XCTAssertGreaterThanOrEqual(
                resume, lastCheckpoint,
                "run \(index + 1) resumed at \(resume), before the durable checkpoint at \(lastCheckpoint)")
            XCTAssertGreaterThan(resume, 0)
            resumeOffsets.append(resume)
        }
        XCTAssertEqual(runs.last?.events.last?["event"] as? String, "done")

        // nginx saw a real range request (with If-Range) for every resume, and answered 206.
        let needles = resumeOffsets.map { "range=\"bytes=\($0)-\"" }
        let log = nginx.waitForLog(nginx.plainAccessLog, containing: needles)
        let lines = log.split(separator: "\n").map(String.init)
        for (needle, offset) in zip(needles, resumeOffsets) {
            let line = lines.first { $0.contains(needle) }
            XCTAssertNotNil(line, "nginx never saw Range: bytes=\(offset)- ; access log:\n\(log)")
            guard let line else { continue }
            XCTAssertTrue(line.hasPrefix("GET /slow/big.gz 206 "), "a resumed request must get 206: \(line)")
            XCTAssertFalse(line.contains("if_range=\"-\""), "a resumed request must carry If-Range: \(line)")
        }
        let fresh = lines.filter { $0.contains("range=\"-\"") }
        XCTAssertEqual(fresh.count, 1, "only the very first run asks for the whole file:\n\(log)")
        print("NginxFetchTests: \(runs.count) runs, resumed at \(resumeOffsets)")
    }

    // MARK: - TLS

    /// nginx over TLS with a certificate from a CA made at test time: refused without the CA
    /// (exit 3, naming the host and the certificate problem), accepted with `--cacert`
    /// (for the IP and the DNS name in the certificate), accepted with a warning under `--insecure`.
    func testHTTPSWithATestCertificateAuthority() throws {
        let data = Data(makeTestData(count: 3 << 20, seed: 7))
        var configuration = Nginx.Configuration()
        configuration.tls = true
        let nginx = try startNginx(self, configuration: configuration) { root in
            try data.write(to: URL(fileURLWithPath: root + "/data.bin"))
        }
        let digest = try sha256Hex(ofFile: nginx.root + "/data.bin")
        let dir = try makeTemporaryDirectory(self)
        let url = nginx.httpsURL("/data.bin")

        let untrusted = try SluiceBinary.run(["-q", "--retries", "2", "fetch \(url) | verify sha256:\(digest) | file \(dir)/untrusted"])
        XCTAssertEqual(untrusted.status, 3, untrusted.stderr)
        XCTAssertTrue(untrusted.stderr.hasPrefix("sluice: "), untrusted.stderr)
        XCTAssertTrue(untrusted.stderr.contains("127.0.0.1"), "the message must name the host: \(untrusted.stderr)")
        let lowered = untrusted.stderr.lowercased()
        XCTAssertTrue(
            lowered.contains("tls") || lowered.contains("certificate"),
            "the message must say it is a TLS/certificate problem: \(untrusted.stderr)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/untrusted"))
        let refusedLog = (try? String(contentsOfFile: nginx.tlsAccessLog, encoding: .utf8)) ?? ""
        XCTAssertFalse(refusedLog.contains("GET /data.bin"), "no request may be sent over an unverified connection:\n\(refusedLog)")

        let trusted = try SluiceBinary.run([
            "-q", "--cacert", nginx.caCertificate,
            "fetch \(url) | verify sha256:\(digest) | file \(dir)/trusted",
        ])
        XCTAssertEqual(trusted.status, 0, trusted.stderr)
        XCTAssertEqual(try shell("cmp '\(nginx.root)/data.bin' '\(dir)/trusted'").status, 0)

        let byName = try SluiceBinary.run([
            "-q", "--cacert", nginx.caCertificate,
            "fetch \(nginx.httpsURL("/data.bin", host: "localhost")) | verify sha256:\(digest) | stdout",
        ])
        XCTAssertEqual(byName.status, 0, byName.stderr)
        XCTAssertTrue(byName.stdout == data)

        let insecure = try SluiceBinary.run([
            "--insecure", "--progress", "none",
            "fetch \(url) | verify sha256:\(digest) | file \(dir)/insecure",
        ])
        XCTAssertEqual(insecure.status, 0, insecure.stderr)
        XCTAssertTrue(insecure.stderr.lowercased().contains("warning"), "--insecure must warn: \(insecure.stderr.debugDescription)")
        XCTAssertTrue(
            insecure.stderr.contains("--insecure") || insecure.stderr.lowercased().contains("not verified"),
            insecure.stderr)
        XCTAssertEqual(try shell("cmp '\(nginx.root)/data.bin' '\(dir)/insecure'").status, 0)
    }

    /// Issue 10 item 6: the CA bundle from the environment, as the curl tool reads it —
    /// `CURL_CA_BUNDLE`, `SSL_CERT_FILE` (a PEM file) and `SSL_CERT_DIR` (a hashed directory);
    /// `--cacert` still wins over them.
    func testCABundleFromTheEnvironment() throws {
        let data = Data(makeTestData(count: 256 << 10, seed: 9))
        var configuration = Nginx.Configuration()
        configuration.tls = true
        let nginx = try startNginx(self, configuration: configuration) { root in
            try data.write(to: URL(fileURLWithPath: root + "/data.bin"))
        }
        let hashed = try makeTemporaryDirectory(self)
        let hash = try shell("openssl x509 -hash -noout -in '\(nginx.caCertificate)'", capture: true).output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try FileManager.default.copyItem(atPath: nginx.caCertificate, toPath: "\(hashed)/\(hash).0")
        let spec = "fetch \(nginx.httpsURL("/data.bin")) | stdout"
        var base = ProcessInfo.processInfo.environment
        for name in ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"] { base[name] = nil }
        for (name, value) in [
            ("CURL_CA_BUNDLE", nginx.caCertificate), ("SSL_CERT_FILE", nginx.caCertificate),
            ("SSL_CERT_DIR", hashed),
        ] {
            var environment = base
            environment[name] = value
            let result = try SluiceBinary.run(["-q", "--retries", "0", spec], environment: environment)
            XCTAssertEqual(result.status, 0, "\(name): \(result.stderr)")
            XCTAssertTrue(result.stdout == data, name)
        }
        var wrong = base
        wrong["SSL_CERT_FILE"] = "/nonexistent/ca.pem"
        let overridden = try SluiceBinary.run(["-q", "--cacert", nginx.caCertificate, spec], environment: wrong)
        XCTAssertEqual(overridden.status, 0, "--cacert wins over SSL_CERT_FILE: \(overridden.stderr)")
        let untrusted = try SluiceBinary.run(["-q", "--retries", "0", spec], environment: base)
        XCTAssertEqual(untrusted.status, 3, "without a CA the test certificate is refused")
    }

    /// An https URL that nginx redirects to plain http is refused (exit 3, saying why) and the
    /// plain server never gets the request; an https → https redirect is followed.
    func testHTTPSToHTTPRedirectIsRefused() throws {
        let data = Data(makeTestData(count: 1 << 20, seed: 8))
        var configuration = Nginx.Configuration()
        configuration.tls = true
        configuration.tlsLocations = [
            "location = /down { return 302 http://127.0.0.1:{PLAIN_PORT}/data.bin; }",
            "location = /hop { return 302 https://127.0.0.1:{TLS_PORT}/data.bin; }",
        ]
        let nginx = try startNginx(self, configuration: configuration) { root in
            try data.write(to: URL(fileURLWithPath: root + "/data.bin"))
        }
        let digest = try sha256Hex(ofFile: nginx.root + "/data.bin")
        let dir = try makeTemporaryDirectory(self)

        // Control: https → https is followed.
        let hop = try SluiceBinary.run([
            "-q", "--cacert", nginx.caCertificate,
            "fetch \(nginx.httpsURL("/hop")) | verify sha256:\(digest) | file \(dir)/hop",
        ])
        XCTAssertEqual(hop.status, 0, hop.stderr)
        XCTAssertEqual(try shell("cmp '\(nginx.root)/data.bin' '\(dir)/hop'").status, 0)

        let down = try SluiceBinary.run([
            "-q", "--cacert", nginx.caCertificate,
            "fetch \(nginx.httpsURL("/down")) | verify sha256:\(digest) | file \(dir)/down",
        ])
        XCTAssertEqual(down.status, 3, down.stderr)
        XCTAssertTrue(down.stderr.hasPrefix("sluice: "), down.stderr)
        XCTAssertTrue(down.stderr.contains("refusing the redirect"), "should say the redirect was refused: \(down.stderr)")
        XCTAssertTrue(
            down.stderr.contains("insecure http://127.0.0.1:\(nginx.port)/data.bin"),
            "should name the insecure target: \(down.stderr)")
        XCTAssertTrue(down.stderr.contains(nginx.httpsURL("/down")), "should name where the redirect came from: \(down.stderr)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/down"))

        let tlsLog = nginx.waitForLog(nginx.tlsAccessLog, containing: ["GET /down 302"])
        XCTAssertTrue(tlsLog.contains("GET /down 302"), tlsLog)
        let plainLog = (try? String(contentsOfFile: nginx.plainAccessLog, encoding: .utf8)) ?? ""
        XCTAssertFalse(plainLog.contains("GET /data.bin"), "the downgraded URL must never be requested:\n\(plainLog)")
    }
}
