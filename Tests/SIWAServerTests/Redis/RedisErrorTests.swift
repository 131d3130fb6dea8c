import SIWARedis
import SIWAServer
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

    @Test("coded errors compare by code and describe themselves as code: message")
    func codedError() {
        #expect(RedisError(.serverError, "WRONGTYPE a") == RedisError(.serverError, "ERR b"))
        #expect(RedisError(.serverError, "x") != RedisError(.connectionLost, "x"))
        #expect(RedisError(.connectionLost, "reset").description == "redis_connection_lost: reset")
        #expect(RedisError.Code.serverError.description == "redis_server_error")
    }
}
