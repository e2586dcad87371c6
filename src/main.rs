fn main() -> std::process::ExitCode {
    rocmforge::cli::main()
}
