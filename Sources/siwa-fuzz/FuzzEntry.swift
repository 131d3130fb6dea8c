@main struct F { static func main() {} }
