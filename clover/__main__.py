from clover.cli import main

main()
