import Sluice

enum HelpText {
    /// One line per stage in the registry: its synopsis, then what it does.
    static var stages: String {
        StageRegistry.all.map { kind in
            let head = kind.arguments.isEmpty ? kind.word : kind.word + " " + kind.arguments.map(\.name).joined(separator: " ")
            let options = kind.options.map { "      \($0.name)=\($0.valueName)".padded(to: 23) + $0.summary }
            return (["  " + head.padded(to: 21) + kind.summary] + options).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    static var usage: String { """
    sluice — resumable, verified byte-stream pipelines

    USAGE
      sluice [OPTIONS] 'STAGE | STAGE | …'     run a pipeline (resumes automatically)
      sluice [OPTIONS] -f SPECFILE              the pipeline from a file (# comments, newlines)
      sluice inspect CHECKPOINT [--json]        show a checkpoint and what a rerun would do
      sluice --help | --version

    STAGES (one source first, any transforms, one sink last)
    \(stages)

    OPTIONS
      -f, --spec-file FILE         read the spec from FILE
      --checkpoint PATH            checkpoint file (default PATH.sluice for a file sink;
                                   required to make a stdout sink resumable)
      --checkpoint-interval SIZE   source bytes between checkpoints, e.g. 8MiB (default); 0 disables
      --restart                    discard an existing checkpoint and partial output, start from zero
      --retries N                  transient transfer failures retried per run (default 5)
      --stall-timeout SECONDS      no data for this long aborts and retries the attempt (default 30)
      -H, --header 'Name: value'   extra request header (repeatable; never stored in a checkpoint)
      --cacert FILE                trust the CA certificates in FILE
      -k, --insecure               do not verify TLS certificates (warns)
      --engine zlib|isal           inflate engine for gunzip (default isal, the fastest)
      --progress auto|bar|json|none  progress on stderr (default auto: a bar on a terminal)
      -q, --quiet                  only errors on stderr
      -h, --help, -V, --version

    EXIT STATUS
      0    success: the output is complete; no partial file, no checkpoint
      2    usage or spec error: nothing created or changed
      3    transfer failed after retries: partial data + checkpoint kept, rerun resumes
      4    checksum mismatch: no output; partial data and checkpoint removed
      5    corrupt compressed data: no output; partial data and checkpoint removed
      6    local I/O error (disk full, permission): partial data + last good checkpoint kept
      7    remote changed since the checkpoint and the sink (stdout) cannot restart
      130  interrupted (SIGINT/SIGTERM): checkpoint saved at the interruption point

    EXAMPLES
      sluice 'fetch https://example.org/data.tar.gz | verify sha256:9f86…08 | gunzip | file data.tar'
      sluice 'read logs.gz | gunzip | stdout' | grep ERROR
      sluice --checkpoint dl.ckpt 'fetch https://example.org/big.gz | gunzip | stdout' >> big
      sluice inspect data.tar.sluice
    """ }
}

extension String {
    /// The string and at least one blank, filled to `width` columns.
    fileprivate func padded(to width: Int) -> String {
        self + String(repeating: " ", count: Swift.max(1, width - count))
    }
}
