from memstrata.cli import main

main()
