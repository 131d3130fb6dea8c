import SIWARedis
import Testing

@Suite("Redis errors: transient or for good")
struct RedisErrorTests {
    @Test(
        "transient: connection trouble and 'not now' replies",
        arguments: [
            RedisError(.connectionFailed, "connection refused"), RedisError(.connectionLost, "reset"),
            RedisError(.serverError, "LOADING Redis is loading the dataset in memory"),
            RedisError(.serverError, "BUSY Redis is busy running a script"),
            RedisError(.serverError, "OOM command not allowed when used memory > 'maxmemory'"),
            RedisError(.serverError, "READONLY You can't write against a read only replica."),
            RedisError(.serverError, "MISCONF Redis is configured to save RDB snapshots"),
        ])
    func transient(_ error: RedisError) { #expect(error.isTransient) }

    @Test(
        "for good: what fails the same way again",
        arguments: [
            RedisError(.serverError, "WRONGTYPE the user key does not hold a hash"),
            RedisError(.serverError, "ERR Error running script"), RedisError(.unsafeKey, "brace in sub"),
            RedisError(.unexpectedReply, "not a status"),
        ])
    func permanent(_ error: RedisError) { #expect(!error.isTransient) }

    @Test(
        "record-specific: only what is about the record sets it aside",
        arguments: [
            RedisError(.serverError, "WRONGTYPE the user key does not hold a hash"),
            RedisError(.unsafeKey, "brace in sub"),
        ])
    func recordSpecific(_ error: RedisError) { #expect(error.isRecordSpecific) }

    @Test(
        "about the deployment: retried, the record stays queued",
        arguments: [
            RedisError(.serverError, "NOPERM this user has no permissions to run the 'evalsha' command"),
            RedisError(.serverError, "NOAUTH Authentication required."),
            RedisError(.serverError, "ERR max number of clients reached"),
            RedisError(.serverError, "ERR Error running script (call to f_0123): @user_script:1: some bug"),
            RedisError(.serverError, "LOADING Redis is loading the dataset in memory"),
            RedisError(
                .serverError,
                "WRONGTYPE the events key siwa:events holds a string, not a stream: every notification is refused"),
            RedisError(.serverError, "WRONGTYPE Operation against a key holding the wrong kind of value"),
            RedisError(.unexpectedReply, "not a status"), RedisError(.connectionLost, "reset"),
            RedisError(.connectionFailed, "AUTH or SELECT failed: WRONGPASS"),
        ])
    func aboutTheDeployment(_ error: RedisError) { #expect(!error.isRecordSpecific) }

    @Test(
        "an error reply's first word is parsed once into its kind",
        arguments: [
            ("TRYAGAIN Multiple keys request during rehashing of slot", RedisError.ReplyKind.tryAgain),
            ("READONLY You can't write against a read only replica.", .readOnly),
            ("CLUSTERDOWN The cluster is down", .clusterDown), ("MASTERDOWN Link with MASTER is down", .masterDown),
            ("MOVED 3999 127.0.0.1:6381", .moved), ("ASK 3999 127.0.0.1:6381", .ask),
            ("NOAUTH Authentication required.", .noAuth),
            ("WRONGPASS invalid username-password pair or user is disabled.", .wrongPassword),
            ("NOPERM this user has no permissions", .noPermission), ("NOSCRIPT No matching script.", .noScript),
            ("ERR invalid password", .err), ("WRONGTYPE Operation against a key", .wrongType),
            ("SOMETHINGNEW from a later Redis", .other("SOMETHINGNEW")),
            // A word is the whole word: a longer one is another kind.
            ("TRYAGAINLATER not a word Redis sends", .other("TRYAGAINLATER")),
        ])
    func replyKind(_ reply: String, _ kind: RedisError.ReplyKind) {
        let error = RedisError(.serverError, reply)
        #expect(error.reply == kind)
        #expect(error.replyKind == String(reply.prefix { $0 != " " }))
    }

    @Test("only a server error reply has a kind; the others name their code")
    func replyKindOfOtherFailures() {
        #expect(RedisError(.connectionLost, "TRYAGAIN in a message").reply == nil)
        #expect(RedisError(.connectionLost, "TRYAGAIN in a message").replyKind == "redis_connection_lost")
        #expect(RedisError(.serverError, "").reply == nil)
        #expect(RedisError(.serverError, "TRYAGAIN keys moving").isTransient)
        #expect(!RedisError(.serverError, "ERR TRYAGAIN quoted inside").isTransient)
    }

    @Test("a refused login is the cause, never read from the message")
    func loginRefusal() {
        let reply = RedisError(.serverError, "WRONGPASS invalid username-password pair")
        #expect(RedisError(.connectionFailed, "AUTH or SELECT failed", cause: .loginRefused(reply)).isLoginRefused)
        #expect(
            !RedisError(.connectionFailed, "AUTH or SELECT failed: WRONGPASS", cause: .underlying(reply)).isLoginRefused
        )
        #expect(!reply.isLoginRefused)
    }

    @Test("coded errors compare by code and describe themselves as code: message")
    func codedError() {
        #expect(RedisError(.serverError, "WRONGTYPE a") == RedisError(.serverError, "ERR b"))
        #expect(RedisError(.serverError, "x") != RedisError(.connectionLost, "x"))
        #expect(RedisError(.connectionLost, "reset").description == "redis_connection_lost: reset")
        #expect(RedisError.Code.serverError.description == "redis_server_error")
    }
}
