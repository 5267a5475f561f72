"""maintenance"""
