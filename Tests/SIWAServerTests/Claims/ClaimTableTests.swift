import Foundation
import Testing

/// Tests/CLAIMS.md maps the claims of README.md and docs/ to tests: every test it names must exist, so the
/// table cannot point at a test that was renamed or removed.
@Suite("Documentation claim table")
struct ClaimTableTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    @Test("every test named in Tests/CLAIMS.md exists")
    func everyNamedTestExists() throws {
        let table = try String(contentsOf: Self.root.appendingPathComponent("Tests/CLAIMS.md"), encoding: .utf8)
        var references = 0
        var deployReferences = 0
        for cell in table.components(separatedBy: "`") where cell.contains("#") || cell.contains("::") {
            guard let (path, name, declaration) = Self.reference(cell) else { continue }
            references += 1
            if path.hasPrefix("deploy-tests/") { deployReferences += 1 }
            let text = try? String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
            #expect(text != nil, "Tests/CLAIMS.md names \(path), which does not exist")
            #expect(
                text?.contains(declaration) == true, "Tests/CLAIMS.md names \(name) in \(path), which has no such test")
        }
        #expect(references >= 40)
        // The pytest rows (the deployment: nginx, the scripts, the package) are checked too.
        #expect(deployReferences >= 40)
    }

    /// The file, the test's name and its declaration a table cell names: `path#function`
    /// (Swift Testing, under Tests/) or `path::test_function` (pytest, under deploy-tests/);
    /// nil for a cell that names no test (the legend's `path::test_function`).
    static func reference(_ cell: String) -> (path: String, name: String, declaration: String)? {
        let swift = cell.components(separatedBy: "#")
        let python = cell.components(separatedBy: "::")
        if swift.count == 2, swift[0].hasPrefix("Tests/") {
            return (swift[0], swift[1], "func \(swift[1])(")
        }
        if python.count == 2, python[0].hasPrefix("deploy-tests/") || python[0].hasPrefix("Tests/") {
            return (python[0], python[1], "def \(python[1])(")
        }
        return nil
    }

    @Test("a deploy-tests row naming a missing file or function is caught")
    func deployRowsAreChecked() throws {
        let row = try #require(Self.reference("deploy-tests/test_rollout.py::test_no_such_function"))
        #expect(row.path == "deploy-tests/test_rollout.py" && row.declaration == "def test_no_such_function(")
        let text = try String(contentsOf: Self.root.appendingPathComponent(row.path), encoding: .utf8)
        #expect(!text.contains(row.declaration))
        #expect(Self.reference("path::test_function") == nil)
    }

    @Test("every test named in docs/security.md exists")
    func everySecurityRowTestExists() throws {
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/security.md"), encoding: .utf8)
        let reference = #/`((?:Tests|deploy-tests)/[^`\s#:]+)(#|::)([A-Za-z_][A-Za-z0-9_]*)`/#
        var references = 0
        for match in page.matches(of: reference) {
            let (path, name) = (String(match.output.1), String(match.output.3))
            let declaration = match.output.2 == "#" ? "func \(name)(" : "def \(name)("
            references += 1
            let text = try? String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
            #expect(text != nil, "docs/security.md names \(path), which does not exist")
            #expect(
                text?.contains(declaration) == true, "docs/security.md names \(name) in \(path), which has no such test"
            )
        }
        #expect(references >= 60)
    }
}
