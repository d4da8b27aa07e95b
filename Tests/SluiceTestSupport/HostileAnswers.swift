/// The lies of issue 8 that both the in-process fetch tests (HostileServerTests) and the
/// binary's (HostileServerCLITests) tell: defined once, so both layers face the same server.
extension FaultServer.Fault {
    /// Item 1: a Content-Range whose last byte is 2^64 − 1, in a close-delimited body.
    static var contentRangePastTwoToTheSixtyFour: Self {
        Self(omitContentLength: true, contentRange: "bytes 0-18446744073709551615/*")
    }

    /// Item 17: a 404 whose reason phrase sets the terminal's title, clears its screen and
    /// returns the cursor.
    static var escapeSequencesInTheReasonPhrase: Self {
        Self(status: 404, reasonPhrase: "Not Found\u{1b}]0;owned\u{07}\u{1b}[2J\r")
    }

    /// How sluice shows that reason phrase: every control character written out.
    static let escapedReasonPhrase = "Not Found\\x1B]0;owned\\x07\\x1B[2J"
}
