import Sluice

/// The manual, as data: `--help` prints it for a terminal, `--manpage` as troff for
/// `man`. Stages come from the stage registry and options from `CommandOption.all`, so
/// neither can describe something the program does not do.
enum HelpText {
    struct Entry {
        let term: String
        let text: String
    }

    struct Section {
        let title: String
        let intro: String?
        let entries: [Entry]
    }

    static let name = "sluice — resumable, verified byte-stream pipelines"

    static var sections: [Section] {
        [
            Section(
                title: "USAGE", intro: nil,
                entries: [
                    Entry(term: "sluice [OPTIONS] 'STAGE | STAGE | …'", text: "run a pipeline (resumes automatically)"),
                    Entry(term: "sluice [OPTIONS] -f SPECFILE", text: "the pipeline from a file (# comments, newlines)"),
                    Entry(term: "sluice inspect CHECKPOINT [--json]", text: "show a checkpoint and what a rerun would do"),
                    Entry(term: "sluice --help | --version", text: "this text; versions"),
                ]),
            Section(
                title: "STAGES", intro: "One source first, any transforms, one sink last. Options are name=value words after a stage's arguments.",
                entries: StageRegistry.all.flatMap { kind -> [Entry] in
                    let head = ([kind.word] + kind.arguments.map(\.name)).joined(separator: " ")
                    return [Entry(term: head, text: kind.summary)]
                        + kind.options.map { Entry(term: "  \($0.name)=\($0.valueName)", text: $0.summary) }
                }),
            Section(title: "OPTIONS", intro: nil, entries: CommandOption.all.map { Entry(term: $0.synopsis, text: $0.help) }),
            Section(
                title: "ENVIRONMENT", intro: nil,
                entries: [
                    Entry(
                        term: "http_proxy, https_proxy, all_proxy, no_proxy",
                        text: "proxies for fetch, read by libcurl (lower case, as curl does; HTTP_PROXY is ignored); --proxy and --noproxy win"),
                    Entry(
                        term: "CURL_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR",
                        text: "CA certificates to trust for https (a PEM file; a hashed directory), as the curl tool reads them; --cacert wins"),
                    Entry(term: "HOME", text: "where --netrc finds .netrc"),
                    Entry(
                        term: "SLUICE_STATE_DIR, XDG_STATE_HOME",
                        text:
                            "where the key that authenticates checkpoints lives: $SLUICE_STATE_DIR/key, else $XDG_STATE_HOME/sluice/key, else ~/.local/state/sluice/key (made on first use, mode 0600)"
                    ),
                ]),
            Section(
                title: "FILES", intro: "Beside a file sink's PATH (every name is refused when a symlink or non-regular file is in the way):",
                entries: [
                    Entry(term: "PATH.sluice-part", text: "the output while it grows; renamed to PATH only when the whole pipeline succeeded"),
                    Entry(term: "PATH.sluice", text: "the checkpoint (mode 0600), unless --checkpoint names another place"),
                    Entry(term: "PATH.sluice.tmp", text: "a checkpoint being written; renamed over the checkpoint"),
                    Entry(term: "PATH.sluice.lock", text: "held while a run works on PATH, so a second run is refused"),
                ]),
            Section(
                title: "EXIT STATUS", intro: nil,
                entries: [
                    Entry(term: "0", text: "success: the output is complete; no partial file, no checkpoint"),
                    Entry(
                        term: "2",
                        text:
                            "usage or spec error, a checkpoint that cannot be used, another run holding the lock, or an unsafe name: nothing created or changed; at the end of a run, a partial output that is not what it should be (a resumed untar's tree, a replaced partial file or checkpoint): partial output and checkpoint kept as they are"
                    ),
                    Entry(
                        term: "3",
                        text:
                            "transfer failed after retries, the server contradicted itself, or --max-time passed: partial data + checkpoint kept, rerun resumes"
                    ),
                    Entry(term: "4", text: "checksum mismatch: no output; partial data and checkpoint removed"),
                    Entry(term: "5", text: "corrupt compressed data, or a stream over its stage's memlimit: no output; partial data and checkpoint removed"),
                    Entry(term: "6", text: "local I/O error (disk full, permission, a thread that cannot start): partial data + last good checkpoint kept"),
                    Entry(term: "7", text: "remote changed since the checkpoint and the sink (stdout) cannot restart"),
                    Entry(
                        term: "130",
                        text:
                            "interrupted (SIGINT/SIGTERM): checkpoint saved at the interruption point; a second signal stops at once, keeping the last checkpoint written"
                    ),
                    Entry(term: "141", text: "stdout's reader went away (| head): killed by SIGPIPE, like cat; the checkpoint is kept"),
                ]),
            Section(
                title: "EXAMPLES", intro: nil,
                entries: [
                    Entry(term: "sluice 'fetch https://example.org/data.tar.gz | verify sha256:9f86…08 | gunzip | file data.tar'", text: ""),
                    Entry(term: "sluice 'read logs.gz | gunzip | stdout' | grep ERROR", text: ""),
                    Entry(term: "sluice --checkpoint dl.ckpt 'fetch https://example.org/big.gz | gunzip | stdout' >> big", text: ""),
                    Entry(term: "sluice inspect data.tar.sluice", text: ""),
                ]),
        ]
    }

    /// `--help`: terms in a column, descriptions beside them (below them when the term is long).
    static var usage: String {
        var lines = [name, ""]
        for section in sections {
            lines.append(section.title)
            if let intro = section.intro { lines += wrap(intro, width: 78).map { "  " + $0 } }
            let indent = String(repeating: " ", count: 33)
            for entry in section.entries {
                var text = wrap(entry.text, width: 80 - indent.count)
                if entry.term.count <= 30, !text.isEmpty {
                    lines.append("  " + entry.term.padded(to: 31) + text.removeFirst())
                } else {
                    lines.append("  " + entry.term)
                }
                lines += text.map { indent + $0 }
            }
            lines.append("")
        }
        return lines.dropLast().joined(separator: "\n")
    }

    /// Lines of at most `width` columns, broken at blanks.
    private static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }

    /// `--manpage`: the same sections as troff (man(7) macros), for `man -l`.
    static var manPage: String {
        var out = [
            ".TH SLUICE 1 \"\" \"sluice \(Sluice.version)\" \"User Commands\"", ".SH NAME", "sluice \\- " + roff("resumable, verified byte-stream pipelines"),
        ]
        for section in sections {
            out.append(".SH " + section.title)
            if let intro = section.intro { out.append(roff(intro)) }
            for entry in section.entries {
                if entry.text.isEmpty {
                    out += [".PP", roff(entry.term)]
                } else {
                    out += [".TP", "\\fB" + roff(entry.term) + "\\fR", roff(entry.text)]
                }
            }
        }
        return out.joined(separator: "\n") + "\n"
    }

    /// Escapes text for troff: backslashes, and a leading dot or quote that would read as a request.
    private static func roff(_ text: String) -> String {
        var escaped = text.replacingAll("\\", with: "\\e").replacingAll("-", with: "\\-")
        if escaped.hasPrefix(".") || escaped.hasPrefix("'") { escaped = "\\&" + escaped }
        return escaped
    }
}

extension String {
    /// The string and at least one blank, filled to `width` columns.
    fileprivate func padded(to width: Int) -> String {
        self + String(repeating: " ", count: Swift.max(1, width - count))
    }
}
