"""Launch LANTERN Explorer: `python app.py` (also the Hugging Face Spaces entry point)."""
from app.page.main import main

if __name__ == "__main__":
    main()
